-- One row per saga instance. Steps live in a JSON array on the row so that a
-- transition is one conditional UPDATE (WHERE version = $old).
CREATE TABLE {{schema}}.sagas (
    id                 uuid        PRIMARY KEY,
    type               text        NOT NULL,
    definition_version integer     NOT NULL,
    aggregate_id       text        NOT NULL,
    idempotency_key    text        NOT NULL,
    state              text        NOT NULL,
    current_step       text        NOT NULL DEFAULT '',
    data               jsonb       NOT NULL,
    steps              jsonb       NOT NULL,
    version            bigint      NOT NULL,
    flag               text        NOT NULL DEFAULT '',
    deadline_at        timestamptz,
    next_wakeup_at     timestamptz,
    created_at         timestamptz NOT NULL,
    updated_at         timestamptz NOT NULL,
    finished_at        timestamptz,
    UNIQUE (type, idempotency_key)
);
-- Timers: due wake-ups are claimed with FOR UPDATE SKIP LOCKED.
CREATE INDEX sagas_wakeup_idx ON {{schema}}.sagas (next_wakeup_at) WHERE next_wakeup_at IS NOT NULL;
-- Status listing: by state, newest first, keyset on (created_at, id).
CREATE INDEX sagas_state_created_idx ON {{schema}}.sagas (state, created_at DESC, id DESC);
CREATE INDEX sagas_type_created_idx ON {{schema}}.sagas (type, created_at DESC, id DESC);
CREATE INDEX sagas_created_idx ON {{schema}}.sagas (created_at DESC, id DESC);
-- Stuck and in-flight queries touch only non-terminal rows.
CREATE INDEX sagas_open_idx ON {{schema}}.sagas (created_at, id)
    WHERE state NOT IN ('completed', 'compensated');

-- Journal: one row per transition (and per ignored late/illegal event).
CREATE TABLE {{schema}}.journal (
    id         bigserial   PRIMARY KEY,
    saga_id    uuid        NOT NULL,
    at         timestamptz NOT NULL,
    event      text        NOT NULL,
    from_state text        NOT NULL DEFAULT '',
    to_state   text        NOT NULL DEFAULT '',
    step       text        NOT NULL DEFAULT '',
    action     text        NOT NULL DEFAULT '',
    message_id uuid,
    actor      text        NOT NULL DEFAULT '',
    reason     text        NOT NULL DEFAULT '',
    ignored    boolean     NOT NULL DEFAULT false
);
CREATE INDEX journal_saga_idx ON {{schema}}.journal (saga_id, id);
CREATE INDEX journal_at_idx ON {{schema}}.journal (at);
