-- One row per executed forward step of the generic benchmark saga: the
-- participant's single business write.
CREATE TABLE {{schema}}.effects (
    saga_id uuid NOT NULL,
    step text NOT NULL,
    at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (saga_id, step)
);
