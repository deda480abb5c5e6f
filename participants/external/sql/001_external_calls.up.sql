-- Calls to an outside system a participant owes (package
-- participants/external): one row per accepted step, written in the
-- handler's transaction with the step's barrier row, and worked off after
-- the commit, outside any transaction. idempotency_key is derived from the
-- barrier key, so every attempt of the call (after a timeout, a crash, a
-- restart) carries the same key and the provider does it at most once.
CREATE TABLE {{schema}}.external_calls (
    saga_id         uuid        NOT NULL,
    step            text        NOT NULL,
    idempotency_key text        NOT NULL UNIQUE,
    request         jsonb       NOT NULL,
    -- pending: to call (again); done / failed: the provider's definite
    -- answer, reported to the saga; abandoned: answered, but the step was
    -- no longer accepted (a compensation cancelled it).
    state           text        NOT NULL DEFAULT 'pending'
                    CHECK (state IN ('pending', 'done', 'failed', 'abandoned')),
    attempts        integer     NOT NULL DEFAULT 0,
    -- next_at: when it may be called (again); lease_until: a worker has
    -- it until then (a crashed worker's call is taken again after it).
    next_at         timestamptz NOT NULL DEFAULT now(),
    lease_until     timestamptz,
    last_error      text        NOT NULL DEFAULT '',
    output          jsonb,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (saga_id, step)
);
CREATE INDEX external_calls_due ON {{schema}}.external_calls (next_at) WHERE state = 'pending';
