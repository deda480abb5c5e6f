#!/usr/bin/env bash
# sagaflow and DTM side by side, as docs/performance.md ("The comparison
# with DTM") reports them: builds DTM v1.19.0 (this module's tool) and the
# load program beside this script, starts DTM on its Postgres store, then
# for each round runs the pgbench reference and, at each concurrency,
# sagaflow's bench and DTM's load alternately. Prints one line a run (with
# the machine's CPU a saga over each measured phase) and the medians with
# their ratio; keeps every run's JSON in OUT.
#
#   go build -o bin/orchestrator ./cmd/orchestrator
#   scripts/dtm-compare/run.sh
#
# Environment: CONCS (default "1 10 50 200"), ROUNDS (3), DURATION (10s),
# OUT (a new temporary directory), ORCHESTRATOR (bin/orchestrator),
# DTM_CONNS (64: DTM's own pool; its default of 500 takes every Postgres
# connection of a default server at 200 in flight and starves the bench),
# DTM_BRANCH_SYNC (1: DTM records each branch's outcome in its own commit
# before the next branch, its default since v1.19.0-10 and sagaflow's
# durability; 0, v1.19.0's default, updates branches in the background).
# Needs the Go module proxy the first time (DTM and its dependencies).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
concs=${CONCS:-"1 10 50 200"}
rounds=${ROUNDS:-3}
duration=${DURATION:-10s}
out=${OUT:-$(mktemp -d)}
orch=${ORCHESTRATOR:-$root/bin/orchestrator}
conns=${DTM_CONNS:-64}
branch_sync=${DTM_BRANCH_SYNC:-1}
mkdir -p "$out"
[ -x "$orch" ] || { echo "$0: $orch is not built (go build -o bin/orchestrator ./cmd/orchestrator)" >&2; exit 2; }
pg=(-h 127.0.0.1 -p 5432 -U postgres)

(cd "$here" && go build -o "$out/dtm" github.com/dtm-labs/dtm && go build -o "$out/load" .)
dtmdir=$(cd "$here" && go list -m -f '{{.Dir}}' github.com/dtm-labs/dtm)

for db in sagaflow_dtm sagaflow_dtm_busi; do
  psql "${pg[@]}" -d postgres -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" -c "CREATE DATABASE $db"
done
psql "${pg[@]}" -d sagaflow_dtm -q -f "$dtmdir/sqls/dtmsvr.storage.postgres.sql" 2>/dev/null
# DTM writes the password into a keyword=value DSN without quotes: an empty
# one makes the driver read the next keyword as the password and connect to
# the default database, so give the trust-auth server any password.
cat >"$out/dtm.yml" <<EOF
Store:
  Driver: 'postgres'
  Host: '127.0.0.1'
  Port: 5432
  User: 'postgres'
  Password: 'unused-with-trust-auth'
  Db: 'sagaflow_dtm'
  MaxOpenConns: $conns
  MaxIdleConns: $conns
UpdateBranchSync: $branch_sync
LogLevel: 'warn'
EOF
if curl -s -o /dev/null http://127.0.0.1:36789/; then
  echo "$0: something already listens on DTM's port 36789; stop it first" >&2
  exit 1
fi
"$out/dtm" -c "$out/dtm.yml" >"$out/dtm.log" 2>&1 &
dtm_pid=$!
trap 'kill $dtm_pid 2>/dev/null || true' EXIT
for _ in $(seq 1 50); do
  curl -sf -o /dev/null http://127.0.0.1:36789/api/dtmsvr/newGid && break
  kill -0 $dtm_pid 2>/dev/null || { echo "$0: DTM exited; see $out/dtm.log" >&2; exit 1; }
  sleep 0.2
done

echo "runs in $out; $(uptime)"
for r in $(seq 1 "$rounds"); do
  echo "pgbench before round $r: $("$root/scripts/pgbench-ref.sh" 2>/dev/null) tps ($(date -u +%H:%M))"
  for c in $concs; do
    f="$out/sagaflow-c$c-r$r.json"
    "$orch" bench --saga generic --steps 3 --concurrency "$c" --duration "$duration" --sagas 0 --json >"$f" 2>"$f.log"
    f="$out/dtm-c$c-r$r.json"
    "$out/load" -c "$c" -d "$duration" >"$f" 2>"$f.log" || { echo "$0: DTM run failed: $(tail -1 "$f.log")" >&2; exit 1; }
    python3 - "$out" "$c" "$r" <<'PY'
import json, sys
out, c, r = sys.argv[1:]
s = json.load(open(f"{out}/sagaflow-c{c}-r{r}.json"))
d = json.load(open(f"{out}/dtm-c{c}-r{r}.json"))
cpu = lambda x: f", machine CPU {1000 * x['host_cpu_seconds_per_saga']:.2f} ms a saga" if x.get("host_cpu_seconds_per_saga") else ""
print(f"c={c} round {r}: sagaflow {s['sagas_per_second']:.1f} sagas/s p50 {s['latency_p50_ms']:.2f} ms{cpu(s)}; "
      f"DTM {d['sagas_per_second']:.1f} sagas/s p50 {d['latency_p50_ms']:.2f} ms{cpu(d)}")
PY
  done
done
echo "pgbench after: $("$root/scripts/pgbench-ref.sh" 2>/dev/null) tps ($(date -u +%H:%M))"
python3 - "$out" "$rounds" $concs <<'PY'
import json, statistics, sys
out, rounds, concs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
for c in concs:
    runs = {k: [json.load(open(f"{out}/{k}-c{c}-r{r}.json")) for r in range(1, rounds + 1)] for k in ("sagaflow", "dtm")}
    med = {k: statistics.median(x["sagas_per_second"] for x in v) for k, v in runs.items()}
    p50 = {k: statistics.median(x["latency_p50_ms"] for x in v) for k, v in runs.items()}
    cpu = {k: statistics.median(1000 * x.get("host_cpu_seconds_per_saga", 0) for x in v) for k, v in runs.items()}
    print(f"median c={c}: sagaflow {med['sagaflow']:.1f} sagas/s (p50 {p50['sagaflow']:.2f} ms, machine CPU {cpu['sagaflow']:.2f} ms a saga), "
          f"DTM {med['dtm']:.1f} (p50 {p50['dtm']:.2f} ms, {cpu['dtm']:.2f} ms a saga), ratio {med['sagaflow'] / med['dtm']:.2f}")
PY
