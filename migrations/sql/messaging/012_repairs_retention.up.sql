-- Retention of dead letters and of the audit of their repairs
-- (retention.dead_letter_after, retention.audit_after): redriven dead
-- letters are purged by redrive time, audit entries by time. Both tables
-- are small and written rarely, so the indexes cost nothing on the hot
-- path; the audit's time follows its ids, so a BRIN index serves it.
CREATE INDEX IF NOT EXISTS dead_letters_redriven_idx ON {{schema}}.dead_letters (redriven_at) WHERE redriven_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS ops_audit_at_brin ON {{schema}}.ops_audit USING brin (at);
