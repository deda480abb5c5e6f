-- sagaflow:no-transaction
-- Open sagas (running, compensating, failed) are counted by type and state
-- (GET /stats, the page's overview, the in-flight gauge), the oldest
-- running or compensating one is looked for (GET /stats) and a page of one
-- open state is listed (GET /sagas?state=failed) on sagas_open_idx. Failed
-- sagas stay in that index until retention (half a year by default), so on
-- a long history it holds far more failed sagas than sagas in flight, and
-- each of those reads fetched every failed saga's row from the table only
-- to read its state and type: 1.3 s for the stats at 10 million sagas.
-- With state and type in the index (INCLUDE), those reads are index-only
-- scans: the rows of failed sagas, which do not change, are on pages the
-- visibility map marks all-visible, and the table is not read for them.
-- Neither column adds a cost to a step's update: state is already indexed
-- (so a state change was never a HOT update) and type never changes.
--
-- Built CONCURRENTLY, outside a transaction, so that the build does not
-- block the sagas' writes on a large table; every statement can be
-- repeated if the run is cut off (see migrations.NoTransactionMarker).
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.sagas_open_covering_idx;
CREATE INDEX CONCURRENTLY sagas_open_covering_idx ON {{schema}}.sagas (created_at, id) INCLUDE (state, type)
    WHERE state NOT IN ('completed', 'compensated');
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.sagas_open_idx;
ALTER INDEX {{schema}}.sagas_open_covering_idx RENAME TO sagas_open_idx;
