-- Dead letters kept for an operator: every record an inbox consumer
-- dead-letters (to <topic>.dlq) is also written here, in the transaction of
-- its batch, with the original topic, coordinates, key, value and headers,
-- so that it can be listed, shown and redriven (orchestrator dlq, GET /dlq).
-- A redrive re-inserts the record into this schema's outbox; the row is kept
-- and marked, never deleted by the redrive.
CREATE TABLE {{schema}}.dead_letters (
    id             bigserial   PRIMARY KEY,
    topic          text        NOT NULL,
    partition      integer     NOT NULL,
    "offset"       bigint      NOT NULL,
    -- the key and header text as received, NUL and invalid UTF-8 replaced
    key            text        NOT NULL DEFAULT '',
    value          bytea       NOT NULL,
    headers        jsonb       NOT NULL DEFAULT '{}'::jsonb,
    message_id     text        NOT NULL DEFAULT '',
    reason         text        NOT NULL,
    dead_at        timestamptz NOT NULL DEFAULT now(),
    redriven_at    timestamptz,
    redriven_by    text        NOT NULL DEFAULT '',
    redrive_reason text        NOT NULL DEFAULT ''
);
-- Listing and redriving read the open dead letters, newest first.
CREATE INDEX dead_letters_open_idx ON {{schema}}.dead_letters (id) WHERE redriven_at IS NULL;

-- Operator actions on messages (redrives, outbox requeues): who, why, when,
-- on what. Saga actions are journaled in the saga's journal instead.
CREATE TABLE {{schema}}.ops_audit (
    id     bigserial   PRIMARY KEY,
    at     timestamptz NOT NULL DEFAULT now(),
    actor  text        NOT NULL,
    reason text        NOT NULL,
    action text        NOT NULL,
    target text        NOT NULL,
    detail jsonb       NOT NULL DEFAULT '{}'::jsonb
);
-- Requeues read the dead rows of an outbox.
CREATE INDEX IF NOT EXISTS outbox_dead_idx ON {{schema}}.outbox (id) WHERE dead_at IS NOT NULL AND sent_at IS NULL;
