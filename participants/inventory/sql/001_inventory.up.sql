-- Stock per SKU. The CHECK is the last line against overselling.
CREATE TABLE {{schema}}.items (
    sku       text    PRIMARY KEY,
    available integer NOT NULL,
    reserved  integer NOT NULL DEFAULT 0,
    sold      integer NOT NULL DEFAULT 0,
    CONSTRAINT items_not_negative CHECK (available >= 0 AND reserved >= 0 AND sold >= 0)
);

-- One reservation per saga: the semantic lock on the units it holds.
CREATE TABLE {{schema}}.reservations (
    saga_id    uuid        PRIMARY KEY,
    order_id   text        NOT NULL,
    sku        text        NOT NULL REFERENCES {{schema}}.items (sku),
    qty        integer     NOT NULL CHECK (qty > 0),
    state      text        NOT NULL CHECK (state IN ('reserved', 'released')),
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX reservations_order_id_idx ON {{schema}}.reservations (order_id);
