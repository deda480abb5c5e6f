-- Fewer index entries per saga (each saga writes its row once and updates it
-- about three times; an update that changes the state, as the last one
-- does, adds an entry to every index whose predicate the row matches, and a
-- journal row is written per transition). Every query keeps an index:
--
-- The journal's primary key becomes (saga_id, id): every read of the journal
-- is by saga (its history, its pages newest first, counts), so one index
-- serves those reads and the key instead of two (journal_saga_idx goes).
-- ids stay unique: they come from the table's sequence.
CREATE UNIQUE INDEX journal_saga_id_key ON {{schema}}.journal (saga_id, id);
ALTER TABLE {{schema}}.journal DROP CONSTRAINT journal_pkey;
ALTER TABLE {{schema}}.journal ADD CONSTRAINT journal_pkey PRIMARY KEY USING INDEX journal_saga_id_key;
DROP INDEX {{schema}}.journal_saga_idx;

-- The idempotency key's uniqueness (per type) and its lookup
-- (GET /sagas?idempotency_key=) share one index, key first: ON CONFLICT
-- (type, idempotency_key) infers a unique index on those columns in any
-- order, and the sagas of one key are few, so sorting them by creation is
-- cheap.
DROP INDEX {{schema}}.sagas_idempotency_key_idx;
CREATE UNIQUE INDEX sagas_idempotency_key_idx ON {{schema}}.sagas (idempotency_key, type);
ALTER TABLE {{schema}}.sagas DROP CONSTRAINT sagas_type_idempotency_key_key;

-- The oldest saga in flight (GET /stats) is the first running or
-- compensating row of sagas_open_idx (created_at, id); its own index goes.
DROP INDEX {{schema}}.sagas_active_created_idx;

-- Listing by state: the open states (running, compensating, failed) are
-- read from sagas_open_idx, bounded by the sagas not finished; only the
-- finished states need an index by state, and a saga enters it once, when
-- it finishes, instead of at its start and again at its end.
DROP INDEX {{schema}}.sagas_state_created_idx;
CREATE INDEX sagas_state_created_idx ON {{schema}}.sagas (state, created_at DESC, id DESC)
    WHERE state IN ('completed', 'compensated');
