-- The orchestrator set's 002 created outbox_unsent_created_idx too, and on a
-- fresh schema it runs after the messaging set's 011 dropped it: drop it
-- here as well (see messaging 011: the outbox stats no longer need it).
DROP INDEX IF EXISTS {{schema}}.outbox_unsent_created_idx;
