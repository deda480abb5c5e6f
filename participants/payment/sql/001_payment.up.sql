-- Append-only ledger of charges. UNIQUE (saga_id, kind): a saga is charged
-- at most once.
CREATE TABLE {{schema}}.ledger (
    id           bigserial   PRIMARY KEY,
    saga_id      uuid        NOT NULL,
    order_id     text        NOT NULL,
    customer     text        NOT NULL,
    amount_cents bigint      NOT NULL CHECK (amount_cents >= 0),
    kind         text        NOT NULL CHECK (kind IN ('charge')),
    created_at   timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT ledger_saga_kind_key UNIQUE (saga_id, kind)
);
CREATE INDEX ledger_customer_idx ON {{schema}}.ledger (customer);
