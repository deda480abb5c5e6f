-- Failed sagas stay until retention (half a year by default), so on a long
-- history they are most of the open sagas, and counting them by type for
-- the stats and the page's overview passed every failed saga's index
-- entry. Their count by type is kept here instead, by triggers on the rare
-- transitions into and out of failed: a saga inserted failed, a state
-- change to or from failed (a saga failing, a repair taking it out of
-- failed), row triggers whose WHEN conditions are checked on the row
-- without calling the function, so the hot path (a start, a step, running
-- to completed) queues no trigger event at all; and deletes (retention's
-- batches, the only statements that delete sagas), counted once a
-- statement from its deleted rows. The count changes in the transaction
-- that changes the saga, so a read sees both in one snapshot: the counts
-- stay exact.
--
-- A type's row is locked by a transition into or out of failed until its
-- transaction ends: concurrent failures of one type wait on each other,
-- which failures (rare) can afford.
CREATE TABLE {{schema}}.failed_counts (
    type text PRIMARY KEY,
    n    bigint NOT NULL
);

CREATE OR REPLACE FUNCTION {{schema}}.count_failed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' AND OLD.state = 'failed' THEN
        INSERT INTO {{schema}}.failed_counts AS c (type, n) VALUES (OLD.type, -1)
        ON CONFLICT (type) DO UPDATE SET n = c.n - 1;
    END IF;
    IF TG_OP IN ('UPDATE', 'INSERT') AND NEW.state = 'failed' THEN
        INSERT INTO {{schema}}.failed_counts AS c (type, n) VALUES (NEW.type, 1)
        ON CONFLICT (type) DO UPDATE SET n = c.n + 1;
    END IF;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION {{schema}}.count_failed_deleted() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO {{schema}}.failed_counts AS c (type, n)
    SELECT type, -count(*) FROM deleted WHERE state = 'failed' GROUP BY type ORDER BY type
    ON CONFLICT (type) DO UPDATE SET n = c.n + excluded.n;
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION {{schema}}.count_failed_truncate() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM {{schema}}.failed_counts;
    RETURN NULL;
END
$$;

-- Creating the triggers locks the saga table against writes until the
-- migration commits, so the count below and the triggers see the same
-- sagas: none fails or leaves failed between them.
CREATE TRIGGER sagas_failed_insert AFTER INSERT ON {{schema}}.sagas
    FOR EACH ROW WHEN (NEW.state = 'failed') EXECUTE FUNCTION {{schema}}.count_failed();
CREATE TRIGGER sagas_failed_update AFTER UPDATE OF state, type ON {{schema}}.sagas
    FOR EACH ROW WHEN ((OLD.state = 'failed' OR NEW.state = 'failed')
                       AND (OLD.state IS DISTINCT FROM NEW.state OR OLD.type IS DISTINCT FROM NEW.type))
    EXECUTE FUNCTION {{schema}}.count_failed();
CREATE TRIGGER sagas_failed_delete AFTER DELETE ON {{schema}}.sagas
    REFERENCING OLD TABLE AS deleted FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.count_failed_deleted();
CREATE TRIGGER sagas_failed_truncate AFTER TRUNCATE ON {{schema}}.sagas
    FOR EACH STATEMENT EXECUTE FUNCTION {{schema}}.count_failed_truncate();

INSERT INTO {{schema}}.failed_counts (type, n)
SELECT type, count(*) FROM {{schema}}.sagas WHERE state NOT IN ('completed', 'compensated') AND state = 'failed' GROUP BY type;
