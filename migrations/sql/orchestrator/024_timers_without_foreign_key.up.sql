-- The timer row no longer references its saga with a foreign key. Every
-- saga start checked the key: a trigger ran a query per saga inserted that
-- locked the new saga row (FOR KEY SHARE) and logged the lock, about 0.08
-- ms of a start's 0.19 ms insert. The key guarded nothing the code does not
-- already: a timer row is written only in the statement that inserts or
-- updates its saga, or by the timer sweep while it holds the saga's row
-- lock; and retention, which deleted timer rows through the key's ON
-- DELETE CASCADE, deletes them itself now (it purges finished sagas, which
-- have none). A timer row whose saga is gone is never claimed: the sweep
-- joins the two.
--
-- Dropping the key locks both tables for an instant. lock_timeout bounds
-- the wait for that lock, so a long transaction on the saga table makes
-- the migration fail (run it again) instead of holding up the writes that
-- would queue behind it.
SET LOCAL lock_timeout = '3s';
ALTER TABLE {{schema}}.timers DROP CONSTRAINT IF EXISTS timers_saga_id_fkey;
