-- Four eyes (issue 26): an operator action that the configuration puts
-- under four eyes for a saga type is first a proposal, which changes
-- nothing; a different actor approves it (the action then runs, audited
-- with both names) or rejects it, and it expires unapproved.
CREATE TABLE IF NOT EXISTS {{schema}}.operator_proposals (
    id              bigserial   PRIMARY KEY,
    saga_id         uuid        NOT NULL,
    saga_type       text        NOT NULL,
    action          text        NOT NULL,
    args            jsonb       NOT NULL,
    reason          text        NOT NULL,
    ticket          text        NOT NULL DEFAULT '',
    proposer        text        NOT NULL,
    created         timestamptz NOT NULL,
    expires         timestamptz NOT NULL,
    state           text        NOT NULL DEFAULT 'proposed'
                    CHECK (state IN ('proposed', 'approved', 'rejected', 'expired')),
    decider         text        NOT NULL DEFAULT '',
    decided         timestamptz,
    decision_reason text        NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS operator_proposals_state_idx ON {{schema}}.operator_proposals (state, id);
CREATE INDEX IF NOT EXISTS operator_proposals_saga_idx ON {{schema}}.operator_proposals (saga_id, id);
-- Retention deletes proposals by expiry and audit rows by time.
CREATE INDEX IF NOT EXISTS operator_proposals_expires_idx ON {{schema}}.operator_proposals (expires);
CREATE INDEX IF NOT EXISTS operator_audit_at_brin ON {{schema}}.operator_audit USING brin (at);

ALTER TABLE {{schema}}.operator_audit ADD COLUMN IF NOT EXISTS approver text NOT NULL DEFAULT '';
ALTER TABLE {{schema}}.operator_audit ADD COLUMN IF NOT EXISTS proposal_id bigint;
