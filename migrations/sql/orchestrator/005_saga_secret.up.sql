-- Each saga's command ids are derived with a secret of its own (an HMAC of
-- saga id, step, action and attempt), so that only a party that saw a
-- command can answer it. Sagas started before this column existed have no
-- secret and keep their name-based ids.
ALTER TABLE {{schema}}.sagas ADD COLUMN IF NOT EXISTS secret bytea;
