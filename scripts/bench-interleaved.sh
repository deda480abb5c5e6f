#!/usr/bin/env bash
# Interleaved bench of several builds, as docs/performance.md ("Measuring a
# change") asks: for each round, a pgbench reference, then for each
# concurrency each build once, alternately. Prints one line a run and the
# medians at the end; keeps every run's JSON in OUT.
#
#   scripts/bench-interleaved.sh before=/tmp/before after=/tmp/after
#
# Environment: CONCS (default "1 10 50 1024"), ROUNDS (3), DURATION (10s),
# OUT (a new temporary directory).
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 name=binary [name=binary ...]" >&2; exit 2; }
concs=${CONCS:-"1 10 50 1024"}
rounds=${ROUNDS:-3}
duration=${DURATION:-10s}
out=${OUT:-$(mktemp -d)}
mkdir -p "$out"
for arg in "$@"; do
  [ -x "${arg#*=}" ] || { echo "$0: ${arg#*=} is not an executable" >&2; exit 2; }
done
echo "runs in $out; $(uptime)"
for r in $(seq 1 "$rounds"); do
  echo "pgbench before round $r: $(scripts/pgbench-ref.sh 2>/dev/null) tps"
  for c in $concs; do
    for arg in "$@"; do
      name=${arg%%=*} bin=${arg#*=}
      f="$out/$name-c$c-r$r.json"
      "$bin" bench --saga generic --steps 3 --concurrency "$c" --duration "$duration" --sagas 0 --json >"$f" 2>"$f.log"
      python3 - "$f" "$name" "$c" "$r" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
print("%s c=%s round %s: %.1f sagas/s, p50 %.1f ms, process CPU %.3f ms/saga, WAL %.1f KB/saga"
      % (sys.argv[2], sys.argv[3], sys.argv[4], d["sagas_per_second"], d["latency_p50_ms"],
         1000 * d["cpu_seconds_per_saga"], d["wal_bytes_per_saga"] / 1000))
PY
    done
  done
done
echo "pgbench after: $(scripts/pgbench-ref.sh 2>/dev/null) tps"
python3 - "$out" <<'PY'
import collections, glob, json, statistics, sys
runs = collections.defaultdict(list)
for f in glob.glob(sys.argv[1] + "/*.json"):
    name, c, _ = f.rsplit("/", 1)[1][:-5].rsplit("-", 2)
    runs[(int(c[1:]), name)].append(json.load(open(f))["sagas_per_second"])
for (c, name) in sorted(runs):
    v = runs[(c, name)]
    print("median c=%d %s: %.1f sagas/s (%s)" % (c, name, statistics.median(v), ", ".join("%.1f" % x for x in v)))
PY
