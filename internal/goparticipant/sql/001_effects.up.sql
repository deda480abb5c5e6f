-- One row per execution of the conformance step's forward: the kit counts
-- them through the answers (Output.Effects), so an effect done twice shows.
CREATE TABLE {{schema}}.conformance_effects (
    id         bigserial   PRIMARY KEY,
    key        text        NOT NULL,
    saga_id    uuid        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX conformance_effects_key_idx ON {{schema}}.conformance_effects (key);
