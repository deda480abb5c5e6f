-- The reply consumer sends its update of a batch's sagas together with the
-- COMMIT of the batch transaction, in one round trip, so the version check
-- of that update cannot be read before the commit: the statement checks
-- itself. require_updated raises serialization_failure (40001, a transient
-- error: the batch transaction rolls back and is retried, and the retry
-- loads the sagas again) when fewer sagas were updated than sent, that is
-- when one was moved by someone else since it was loaded.
CREATE OR REPLACE FUNCTION {{schema}}.require_updated(updated bigint, wanted integer) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
  IF updated <> wanted THEN
    RAISE EXCEPTION 'sagaflow: % of % sagas moved since they were loaded (version conflict)', wanted - updated, wanted
      USING ERRCODE = '40001';
  END IF;
  RETURN updated;
END
$$;
