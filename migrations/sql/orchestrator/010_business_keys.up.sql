-- Find a saga by its business key: GET /sagas?aggregate_id=... and
-- ?idempotency_key=... (newest first, keyset on created_at, id). The
-- idempotency key is unique per type only, so it gets an index of its own.
-- Neither column changes after the start, so these indexes keep step
-- updates HOT.
CREATE INDEX IF NOT EXISTS sagas_aggregate_idx ON {{schema}}.sagas (aggregate_id, created_at DESC, id DESC);
CREATE INDEX IF NOT EXISTS sagas_idempotency_key_idx ON {{schema}}.sagas (idempotency_key, created_at DESC, id DESC);
