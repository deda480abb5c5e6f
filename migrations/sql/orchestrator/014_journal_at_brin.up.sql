-- The reconciler reads the journal entries of its window (reconcile.since,
-- a day by default) on every run. Journal rows are only ever appended, in
-- time order, so a BRIN index on their time finds the window's pages
-- without reading the whole history, and costs next to nothing per insert
-- (migration 004 dropped the btree index on it from the hot path).
CREATE INDEX IF NOT EXISTS journal_at_brin ON {{schema}}.journal USING brin (at);
