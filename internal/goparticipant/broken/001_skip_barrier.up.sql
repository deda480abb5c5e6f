-- The deliberately broken participant: before a barrier row is inserted,
-- the decided row with the same key is deleted, so the SDK never finds a
-- copy's recorded outcome and executes every copy. Only tests use it, to
-- show that the kit fails a participant that skips its barrier.
CREATE FUNCTION {{schema}}.skip_barrier() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM {{schema}}.barrier
    WHERE saga_id = NEW.saga_id AND step = NEW.step AND action = NEW.action AND outcome <> 'pending';
    RETURN NEW;
END;
$$;
CREATE TRIGGER skip_barrier BEFORE INSERT ON {{schema}}.barrier
    FOR EACH ROW EXECUTE FUNCTION {{schema}}.skip_barrier();
