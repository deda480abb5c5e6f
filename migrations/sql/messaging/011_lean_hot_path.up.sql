-- Fewer index entries per message on the hot path (every saga writes six
-- inbox rows and six outbox rows across the orchestrator and its
-- participants):
--
-- Retention purges inbox rows by age. Rows are appended in time order, so a
-- BRIN index on received_at finds the old ones (as the barrier table's
-- does), where the btree took one entry per consumed message, always on its
-- right-most page.
CREATE INDEX IF NOT EXISTS inbox_received_brin ON {{schema}}.inbox USING brin (received_at);
DROP INDEX IF EXISTS {{schema}}.inbox_received_at_idx;
-- The outbox stats (depth, oldest unsent row, dead rows) read the unsent
-- rows through outbox_unsent_idx and the dead ones through outbox_dead_idx:
-- a third index over the unsent rows took an entry for every message.
DROP INDEX IF EXISTS {{schema}}.outbox_unsent_created_idx;
