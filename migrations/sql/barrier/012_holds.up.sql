-- Holds: the semantic locks a participant's steps take (package
-- participants/holds). A hold says "quantity units of resource are held by
-- saga S for step T since t"; a later step of the saga confirms it (the units
-- are committed, e.g. sold) or its compensation releases it. The primary key
-- makes taking a hold idempotent under redelivery.
CREATE TABLE {{schema}}.holds (
    saga_id    uuid        NOT NULL,
    step       text        NOT NULL,
    resource   text        NOT NULL CHECK (resource <> ''),
    quantity   bigint      NOT NULL CHECK (quantity > 0),
    state      text        NOT NULL DEFAULT 'held' CHECK (state IN ('held', 'confirmed', 'released')),
    since      timestamptz NOT NULL DEFAULT now(),
    -- settled_at: when the hold was confirmed or released; NULL while held.
    settled_at timestamptz,
    PRIMARY KEY (saga_id, step, resource),
    CONSTRAINT holds_settled CHECK ((state = 'held') = (settled_at IS NULL))
);
-- "Who is holding this?": the holds of one resource, oldest first.
CREATE INDEX holds_resource_idx ON {{schema}}.holds (resource, since);
-- The holds still held, oldest first (an operator's list, the invariant
-- checks); small, since a hold is settled when its saga ends.
CREATE INDEX holds_held_since_idx ON {{schema}}.holds (since) WHERE state = 'held';
-- Retention purges the settled holds by age (retention.barrier_after).
CREATE INDEX holds_settled_idx ON {{schema}}.holds (settled_at) WHERE state <> 'held';
