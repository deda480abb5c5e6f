-- Coupons; locked_by is the saga holding the coupon (the semantic lock).
CREATE TABLE {{schema}}.coupons (
    code           text        PRIMARY KEY,
    discount_cents bigint      NOT NULL DEFAULT 500 CHECK (discount_cents >= 0),
    locked_by      uuid,
    locked_at      timestamptz,
    CONSTRAINT coupons_lock_consistent CHECK ((locked_by IS NULL) = (locked_at IS NULL))
);
CREATE INDEX coupons_locked_by_idx ON {{schema}}.coupons (locked_by) WHERE locked_by IS NOT NULL;
