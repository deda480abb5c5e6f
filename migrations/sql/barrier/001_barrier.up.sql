-- Participant barrier: one row per (saga, step, action) ever executed or
-- closed. The primary key serialises concurrent copies of a command and the
-- race between a forward and its compensation.
CREATE TABLE {{schema}}.barrier (
    saga_id    uuid        NOT NULL,
    step       text        NOT NULL,
    action     text        NOT NULL CHECK (action IN ('forward', 'compensate')),
    -- pending exists only inside the transaction running the handler: the
    -- SDK always records the outcome (or rolls the row back) before the
    -- transaction can commit.
    outcome    text        NOT NULL CHECK (outcome IN ('pending', 'success', 'failure')),
    reason     text        NOT NULL DEFAULT '',
    payload    jsonb,
    -- closed: written by a compensation that found no forward (empty
    -- compensation); a later forward with this row is refused.
    closed     boolean     NOT NULL DEFAULT false,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (saga_id, step, action)
);
