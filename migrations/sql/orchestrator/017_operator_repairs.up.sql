-- Repair actions (issue 26): the journal keeps the ticket an operator's
-- action carried, and every operator action (but the reconciler's checks)
-- leaves an audit row with the saga's state, data and step states before
-- and after.
ALTER TABLE {{schema}}.journal ADD COLUMN IF NOT EXISTS ticket text NOT NULL DEFAULT '';

CREATE TABLE IF NOT EXISTS {{schema}}.operator_audit (
    id        bigserial   PRIMARY KEY,
    saga_id   uuid        NOT NULL,
    saga_type text        NOT NULL,
    at        timestamptz NOT NULL,
    action    text        NOT NULL,
    actor     text        NOT NULL,
    reason    text        NOT NULL,
    ticket    text        NOT NULL DEFAULT '',
    step      text        NOT NULL DEFAULT '',
    before    jsonb       NOT NULL,
    after     jsonb       NOT NULL
);
CREATE INDEX IF NOT EXISTS operator_audit_saga_idx ON {{schema}}.operator_audit (saga_id, id);
