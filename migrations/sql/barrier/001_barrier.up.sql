-- Participant barrier: one row per (saga, step, action) ever executed or
-- closed. The primary key serialises concurrent copies of a command and the
-- race between a forward and its compensation.
CREATE TABLE {{schema}}.barrier (
    saga_id    uuid        NOT NULL,
    step       text        NOT NULL,
    action     text        NOT NULL CHECK (action IN ('forward', 'compensate')),
    outcome    text        NOT NULL CHECK (outcome IN ('success', 'failure')),
    reason     text        NOT NULL DEFAULT '',
    payload    jsonb,
    -- closed: written by a compensation that found no forward (empty
    -- compensation); a later forward with this row is refused.
    closed     boolean     NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (saga_id, step, action)
);
