-- Retention purges barrier rows by age (retention.barrier_after). Rows are
-- appended in time order, so a BRIN index on created_at finds the old ones
-- at a fraction of a btree's size and write cost on the participant's hot
-- path.
CREATE INDEX IF NOT EXISTS barrier_created_brin ON {{schema}}.barrier USING brin (created_at);
