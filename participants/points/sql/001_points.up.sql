-- One entry per order (primary key) and per saga (unique).
CREATE TABLE {{schema}}.entries (
    order_id   text        PRIMARY KEY,
    saga_id    uuid        NOT NULL UNIQUE,
    customer   text        NOT NULL,
    points     bigint      NOT NULL CHECK (points >= 0),
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX entries_customer_idx ON {{schema}}.entries (customer);

-- Running balance per customer, updated additively with each new entry.
CREATE TABLE {{schema}}.balances (
    customer   text        PRIMARY KEY,
    points     bigint      NOT NULL CHECK (points >= 0),
    updated_at timestamptz NOT NULL DEFAULT now()
);
