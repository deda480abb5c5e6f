-- Reconciliation: what the reconciler found that it could not (or must
-- not) repair, open until the saga moves on or a person resolves it; and
-- one row per run (the last run's time is what the "reconciler not running"
-- alert watches).
CREATE TABLE IF NOT EXISTS {{schema}}.reconcile_discrepancies (
    id           bigserial   PRIMARY KEY,
    saga_id      uuid        NOT NULL,
    saga_type    text        NOT NULL DEFAULT '',
    saga_version bigint      NOT NULL DEFAULT 0,
    step         text        NOT NULL DEFAULT '',
    kind         text        NOT NULL,
    detail       text        NOT NULL DEFAULT '',
    repair       text        NOT NULL DEFAULT '',
    found_at     timestamptz NOT NULL DEFAULT now(),
    last_seen_at timestamptz NOT NULL DEFAULT now(),
    resolved_at  timestamptz,
    resolved_by  text        NOT NULL DEFAULT '',
    resolution   text        NOT NULL DEFAULT ''
);
CREATE UNIQUE INDEX IF NOT EXISTS reconcile_discrepancies_open_key
    ON {{schema}}.reconcile_discrepancies (saga_id, step, kind) WHERE resolved_at IS NULL;
CREATE INDEX IF NOT EXISTS reconcile_discrepancies_found_idx
    ON {{schema}}.reconcile_discrepancies (found_at DESC, id DESC);

CREATE TABLE IF NOT EXISTS {{schema}}.reconcile_runs (
    id          bigserial   PRIMARY KEY,
    started_at  timestamptz NOT NULL,
    finished_at timestamptz NOT NULL,
    differences integer     NOT NULL,
    repaired    integer     NOT NULL,
    report      jsonb       NOT NULL
);
-- The journal's differences and checks are read by event within a window.
CREATE INDEX IF NOT EXISTS journal_reconcile_idx ON {{schema}}.journal (event, at)
    WHERE event IN ('difference', 'check sent');
