-- Stray dead letters: a reply that answers nothing the orchestrator sent
-- (an unknown saga or step, an in_reply_to the saga never sent) is
-- dead-lettered marked stray. No operator needs to act on it, so retention
-- purges it after retention.stray_dead_letter_after even if it was never
-- redriven (anyone who can write the reply topic could otherwise grow the
-- table without end). The partial index serves that purge.
ALTER TABLE {{schema}}.dead_letters ADD COLUMN IF NOT EXISTS stray boolean NOT NULL DEFAULT false;
CREATE INDEX IF NOT EXISTS dead_letters_stray_idx ON {{schema}}.dead_letters (dead_at) WHERE stray AND redriven_at IS NULL;
