-- At most one shipment per order (primary key) and per saga (unique).
CREATE TABLE {{schema}}.shipments (
    order_id    text        PRIMARY KEY,
    shipment_id uuid        NOT NULL UNIQUE DEFAULT gen_random_uuid(),
    saga_id     uuid        NOT NULL UNIQUE,
    customer    text        NOT NULL,
    sku         text        NOT NULL,
    qty         integer     NOT NULL CHECK (qty > 0),
    created_at  timestamptz NOT NULL DEFAULT now()
);
