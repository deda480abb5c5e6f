-- Where a step's time goes, from the timestamps the bench database keeps
-- (the bench prints the same per step; this is the query to dig further).
-- Run after 'orchestrator bench --saga generic --steps 3 ...' (database
-- sagaflow_bench): psql -d sagaflow_bench -f docs/perf/step-hops.sql
--   cmd_hop:   the orchestrator decided the step (steps[].started_at) ->
--              the participant's transaction began (barrier.created_at):
--              commit, relay, Kafka, the participant consumer's queue.
--   reply_hop: participant transaction began -> the orchestrator's reply
--              transaction began (inbox.received_at): handler, commit,
--              relay, Kafka, the reply consumer's queue.
--   apply:     reply transaction began -> the step recorded finished.
WITH st AS (
  SELECT s.id, s.created_at, (x.ord)::int AS i, x.e->>'name' AS step,
         (x.e->>'started_at')::timestamptz AS started, (x.e->>'finished_at')::timestamptz AS finished
  FROM sagaflow.sagas s, jsonb_array_elements(s.steps) WITH ORDINALITY AS x(e, ord)
  WHERE s.state = 'completed'
), b AS (
  SELECT saga_id, step, created_at FROM bench_p1.barrier WHERE action = 'forward'
  UNION ALL SELECT saga_id, step, created_at FROM bench_p2.barrier WHERE action = 'forward'
  UNION ALL SELECT saga_id, step, created_at FROM bench_p3.barrier WHERE action = 'forward'
), r AS (
  SELECT j.saga_id, j.step, i.received_at FROM sagaflow.journal j JOIN sagaflow.inbox i ON i.message_id = j.message_id
  WHERE j.event = 'step succeeded'
), h AS (
  SELECT st.i, extract(epoch FROM b.created_at - st.started) * 1000 AS cmd_hop,
         extract(epoch FROM r.received_at - b.created_at) * 1000 AS reply_hop,
         extract(epoch FROM st.finished - r.received_at) * 1000 AS apply
  FROM st JOIN b ON b.saga_id = st.id AND b.step = st.step JOIN r ON r.saga_id = st.id AND r.step = st.step
)
SELECT i,
  round(percentile_cont(0.5) WITHIN GROUP (ORDER BY cmd_hop)::numeric, 1) cmd_p50, round(percentile_cont(0.99) WITHIN GROUP (ORDER BY cmd_hop)::numeric, 1) cmd_p99,
  round(percentile_cont(0.5) WITHIN GROUP (ORDER BY reply_hop)::numeric, 1) reply_p50, round(percentile_cont(0.99) WITHIN GROUP (ORDER BY reply_hop)::numeric, 1) reply_p99,
  round(percentile_cont(0.5) WITHIN GROUP (ORDER BY apply)::numeric, 1) apply_p50, round(percentile_cont(0.99) WITHIN GROUP (ORDER BY apply)::numeric, 1) apply_p99, count(*)
FROM h GROUP BY i ORDER BY i;
