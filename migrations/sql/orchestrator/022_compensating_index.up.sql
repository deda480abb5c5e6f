-- sagaflow:no-transaction
-- The oldest compensating saga of each type (the backlog of GET /stats,
-- the page and the sagaflow_saga_oldest_compensating_seconds gauge) was
-- picked on sagas_in_flight_idx: the scan passed the entry of every saga in
-- flight, so with a hundred thousand in flight each read took as long as
-- counting them. The compensating sagas get an index of their own, by type
-- and creation, so that each type's oldest is the first entry of its range.
-- A saga has an entry only while it compensates: a saga that never
-- compensates costs nothing here, and the update into compensating changes
-- the state, which sagas_in_flight_idx holds, so it was not a HOT update
-- before either.
--
-- Built CONCURRENTLY, outside a transaction (see migration 019); every
-- statement can be repeated if the run is cut off.
DROP INDEX CONCURRENTLY IF EXISTS {{schema}}.sagas_compensating_idx;
CREATE INDEX CONCURRENTLY sagas_compensating_idx ON {{schema}}.sagas (type, created_at, id)
    WHERE state = 'compensating';
