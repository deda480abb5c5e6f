-- Every saga has a command-id secret (migration 005 added the column; the
-- engine has given every saga it started since then one). A saga started
-- before that, which derived its command ids from its id alone, gets a
-- random secret now: an answer to a command it sent before is refused as
-- stray, and the step's timeout sends the command again under the new id
-- (the participant's barrier answers it from what it recorded). Then the
-- column may no longer be empty; a row inserted without one (by hand) gets
-- a random one.
UPDATE {{schema}}.sagas SET secret = uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid())
WHERE secret IS NULL OR length(secret) = 0;
ALTER TABLE {{schema}}.sagas
  ALTER COLUMN secret SET DEFAULT uuid_send(gen_random_uuid()) || uuid_send(gen_random_uuid()),
  ALTER COLUMN secret SET NOT NULL;
