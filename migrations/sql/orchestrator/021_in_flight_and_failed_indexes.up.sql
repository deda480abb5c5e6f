-- sagaflow:no-transaction
-- The open sagas' index (sagas_open_idx: running, compensating and failed
-- sagas by creation) is split in two: the sagas in flight (running,
-- compensating) and the failed ones. Failed sagas stay until retention, so
-- on a long history they were most of the open index, and the reads of the
-- sagas in flight (their counts by type and state, the oldest one, the
-- reconciler's stuck sagas) passed every failed saga's entry; now they
-- read the sagas in flight only, and the failed ones are counted in
-- failed_counts (migration 020). A saga has an entry in at most one of the
-- two at a time, as it had in the one index: no more index entries on the
-- hot path than before. Both carry the state and type (INCLUDE), so those
-- reads and a page of one open state stay index-only scans.
--
-- Built CONCURRENTLY, outside a transaction (see migration 019); every
-- statement can be repeated if the run is cut off.
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.sagas_in_flight_idx;
CREATE INDEX CONCURRENTLY sagas_in_flight_idx ON {{schema}}.sagas (created_at, id) INCLUDE (state, type)
    WHERE state IN ('running', 'compensating');
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.sagas_failed_idx;
CREATE INDEX CONCURRENTLY sagas_failed_idx ON {{schema}}.sagas (created_at, id) INCLUDE (state, type)
    WHERE state = 'failed';
-- The oldest flagged saga of each type (the backlog of GET /stats and the
-- page) read the row of every open saga to see its flag, failed ones
-- included. The open flagged sagas have an index of their own, by type and
-- creation: an entry only for a saga with a flag, which is rare (an
-- operator's eye needed), and an update that sets or clears a flag is no
-- longer a HOT update.
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.sagas_flagged_idx;
CREATE INDEX CONCURRENTLY sagas_flagged_idx ON {{schema}}.sagas (type, created_at, id)
    WHERE flag <> '' AND state NOT IN ('completed', 'compensated');
-- The open sagas' index last, once every read has the indexes above.
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.sagas_open_idx;
