-- Bookable items (a flight, a hotel, a car model) and how many are taken.
CREATE TABLE {{schema}}.items (
    item     text    PRIMARY KEY,
    capacity integer NOT NULL CHECK (capacity >= 0),
    reserved integer NOT NULL DEFAULT 0,
    CONSTRAINT items_within_capacity CHECK (reserved >= 0 AND reserved <= capacity)
);
-- One reservation per saga: reserved by the forward, released by the
-- compensation, confirmed after the payment.
CREATE TABLE {{schema}}.reservations (
    saga_id        uuid        PRIMARY KEY,
    reservation_id text        NOT NULL UNIQUE,
    trip_id        text        NOT NULL,
    customer       text        NOT NULL,
    item           text        NOT NULL REFERENCES {{schema}}.items (item),
    state          text        NOT NULL CHECK (state IN ('reserved', 'confirmed', 'released')),
    created_at     timestamptz NOT NULL DEFAULT now(),
    updated_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX reservations_trip_idx ON {{schema}}.reservations (trip_id);
