-- The reconciler asks, for everything a run found, whether a discrepancy
-- of that saga, step and kind was settled before: an index of the settled
-- ones keeps that lookup off a scan of every discrepancy ever resolved.
CREATE INDEX IF NOT EXISTS reconcile_discrepancies_settled_idx
    ON {{schema}}.reconcile_discrepancies (saga_id, step, kind) WHERE resolved_at IS NOT NULL;

-- The reconciler reads the journal entries that moved a saga out of an
-- end state (completed, compensated, failed) in its window: a finished
-- saga an operator checked or resolved, a failed one queried again, and
-- transitions no operator made, which are findings. They are rare; this
-- index finds them without reading the window's whole journal. The journal
-- is append-only: the index costs nothing on the hot path but its own rare
-- inserts.
CREATE INDEX IF NOT EXISTS journal_from_end_idx
    ON {{schema}}.journal (at) WHERE from_state IN ('completed', 'compensated', 'failed') AND NOT ignored;
