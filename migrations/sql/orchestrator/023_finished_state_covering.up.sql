-- sagaflow:no-transaction
-- A page of one finished state (completed, compensated), with or without a
-- type, was read on whichever of sagas_state_created_idx and
-- sagas_created_idx the planner guessed cheaper. For a common state it
-- took the index of every saga by creation, expecting matches spread
-- evenly; but the newest sagas are the ones in flight, so with a hundred
-- thousand of them it read a hundred thousand rows before the first
-- completed one (730 ms at ten million sagas). The finished sagas' index
-- now carries the type (INCLUDE): the page's ids come from an index-only
-- scan of it, as the open states' pages do (migration 021), which the
-- planner prefers to reading rows, and the rows are read for the page only.
-- Its entries are written at a saga's finish, as before, a few bytes
-- longer.
--
-- Built CONCURRENTLY, outside a transaction (see migration 019); every
-- statement can be repeated if the run is cut off. The old index is dropped
-- once the new one is in place.
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.sagas_finished_state_idx;
CREATE INDEX CONCURRENTLY sagas_finished_state_idx ON {{schema}}.sagas (state, created_at DESC, id DESC) INCLUDE (type)
    WHERE state IN ('completed', 'compensated');
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.sagas_state_created_idx;
