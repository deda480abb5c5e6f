-- Answer later: a forward answered accepted keeps outcome 'accepted' until
-- the participant settles it (participants.Participant.Complete or Fail,
-- which record success or failure and reply in their caller's
-- transaction). The final reply answers the latest copy of the command the
-- barrier answered accepted: command_id and attempt (moved on by a later
-- copy), on the topic reply_to. cancellable: a compensation that meets the
-- accepted forward settles it as failed (reason cancelled) instead of being
-- held until the forward is settled.
ALTER TABLE {{schema}}.barrier DROP CONSTRAINT IF EXISTS barrier_outcome_check;
ALTER TABLE {{schema}}.barrier ADD CONSTRAINT barrier_outcome_check
    CHECK (outcome IN ('pending', 'success', 'failure', 'accepted'));
ALTER TABLE {{schema}}.barrier
    ADD COLUMN IF NOT EXISTS reply_to    text,
    ADD COLUMN IF NOT EXISTS command_id  uuid,
    ADD COLUMN IF NOT EXISTS attempt     integer,
    ADD COLUMN IF NOT EXISTS cancellable boolean NOT NULL DEFAULT false;
-- The steps still accepted (few), for a participant's own listing.
CREATE INDEX IF NOT EXISTS barrier_accepted ON {{schema}}.barrier (created_at) WHERE outcome = 'accepted';
