-- Indexes for the status API (GET /sagas filters and GET /stats), so that
-- no status query reads the whole saga history.

-- GET /sagas?step=X: the active step of open sagas (running, compensating,
-- failed), newest first.
CREATE INDEX sagas_open_step_idx ON {{schema}}.sagas (current_step, created_at DESC, id DESC)
    WHERE state NOT IN ('completed', 'compensated');
-- GET /stats: age of the oldest saga still in flight.
CREATE INDEX sagas_active_created_idx ON {{schema}}.sagas (created_at)
    WHERE state IN ('running', 'compensating');
-- GET /stats: sagas finished within the stats window, by type and state.
CREATE INDEX sagas_finished_idx ON {{schema}}.sagas (finished_at)
    WHERE finished_at IS NOT NULL;
-- GET /stats: outbox depth and oldest unsent row (dead rows included, counted
-- apart) without reading the sent history. The outbox table comes from the
-- messaging set, applied before this one in the same schema.
CREATE INDEX IF NOT EXISTS outbox_unsent_created_idx ON {{schema}}.outbox (created_at)
    WHERE sent_at IS NULL;
