-- Timers move to their own small table so that a saga's step-to-step
-- update can be a HOT update (no new index entries): Postgres updates a row
-- in place on its page only when no indexed column changes, and every step
-- changes next_wakeup_at (the step's timeout) and current_step. The saga row
-- keeps next_wakeup_at as information; the timers table is what due timers
-- are claimed from.
CREATE TABLE {{schema}}.timers (
    saga_id uuid        PRIMARY KEY REFERENCES {{schema}}.sagas (id) ON DELETE CASCADE,
    due_at  timestamptz NOT NULL
);
CREATE INDEX timers_due_idx ON {{schema}}.timers (due_at);
INSERT INTO {{schema}}.timers (saga_id, due_at)
    SELECT id, next_wakeup_at FROM {{schema}}.sagas WHERE next_wakeup_at IS NOT NULL;
DROP INDEX {{schema}}.sagas_wakeup_idx;

-- GET /sagas?step=X reads the open sagas (sagas_open_idx) and filters on
-- current_step: that is bounded by the sagas in flight, and indexing
-- current_step would make every step change a non-HOT update.
DROP INDEX {{schema}}.sagas_open_step_idx;

-- Room on each page for the new versions of its rows: a HOT update needs
-- free space on the row's own page. Rows of finished sagas keep the space.
ALTER TABLE {{schema}}.sagas SET (fillfactor = 50);
