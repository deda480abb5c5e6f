-- Outbox stats (pending depth, oldest unsent age, dead rows) for every
-- outbox, the orchestrator's and each participant's, without reading the
-- sent history. The orchestrator set created the same index for its own
-- outbox first; IF NOT EXISTS keeps both orders valid.
CREATE INDEX IF NOT EXISTS outbox_unsent_created_idx ON {{schema}}.outbox (created_at)
    WHERE sent_at IS NULL;
