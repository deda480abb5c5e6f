-- lookup: the orchestrator queried the accepted step (it gave up waiting
-- for the answer): the next attempt asks the provider what became of the
-- call (Config.Lookup) instead of making it, and settles the step by that.
ALTER TABLE {{schema}}.external_calls ADD COLUMN IF NOT EXISTS lookup boolean NOT NULL DEFAULT false;
