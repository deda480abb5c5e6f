#!/usr/bin/env bash
# check-metrics.sh: lint a live /metrics scrape with promtool and check that
# the metrics sagaflow documents are there.
#
#   scripts/check-metrics.sh [--role serve|participants] [--strict] [URL]
#
# URL defaults to http://127.0.0.1:8080/metrics (`orchestrator serve`); for
# `orchestrator participants --http-addr 127.0.0.1:8081` use --role
# participants http://127.0.0.1:8081/metrics. Without --strict, metrics that
# only appear once something happened (a late reply, a DLQ record...) are
# reported as "not yet seen"; with --strict (after a workload with failures)
# they must be present and non-zero. Needs curl and promtool
# (apt-get install -y prometheus). Exit status 0 when everything passes.
set -euo pipefail

role=serve strict=0 url=""
while [ $# -gt 0 ]; do
	case "$1" in
	--role) role="$2"; shift 2 ;;
	--strict) strict=1; shift ;;
	-h|--help) sed -n '2,14p' "$0"; exit 0 ;;
	*) url="$1"; shift ;;
	esac
done
url="${url:-http://127.0.0.1:8080/metrics}"

command -v promtool >/dev/null || { echo "promtool not found: apt-get update && apt-get install -y prometheus" >&2; exit 2; }
scrape="$(mktemp)"
trap 'rm -f "$scrape"' EXIT
curl -fsS "$url" >"$scrape" || { echo "cannot scrape $url" >&2; exit 2; }

fail=0
if promtool check metrics <"$scrape"; then
	echo "promtool check metrics: OK ($(grep -vc '^#' "$scrape") samples from $url)"
else
	echo "promtool check metrics: FAILED" >&2
	fail=1
fi

# present NAME: a sample named NAME exists.
present() { grep -Eq "^$1(\{| )" "$scrape"; }
# total NAME: sum of the samples named NAME.
total() { awk -v n="$1" '$1 == n || index($1, n "{") == 1 { s += $NF } END { printf "%g", s + 0 }' "$scrape"; }

case "$role" in
serve)
	always="process_cpu_seconds_total go_goroutines sagaflow_build_info sagaflow_relay_published_total sagaflow_relay_publish_errors_total sagaflow_outbox_pending sagaflow_outbox_oldest_unsent_seconds sagaflow_outbox_dead sagaflow_inbox_messages_total sagaflow_inbox_duplicates_total sagaflow_dlq_messages_total sagaflow_sagas_in_flight"
	moved="sagaflow_sagas_started_total sagaflow_sagas_finished_total sagaflow_saga_transitions_total sagaflow_step_duration_seconds_count sagaflow_saga_duration_seconds_count sagaflow_relay_publish_seconds_count sagaflow_relay_batch_size_count sagaflow_late_replies_total sagaflow_illegal_transitions_total sagaflow_step_retries_total"
	;;
participants)
	always="process_cpu_seconds_total go_goroutines sagaflow_build_info sagaflow_relay_published_total sagaflow_outbox_pending sagaflow_outbox_oldest_unsent_seconds sagaflow_outbox_dead sagaflow_inbox_messages_total sagaflow_inbox_duplicates_total sagaflow_dlq_messages_total"
	moved="sagaflow_relay_publish_seconds_count sagaflow_relay_batch_size_count"
	;;
*) echo "--role must be serve or participants" >&2; exit 2 ;;
esac

for m in $always; do
	if present "$m"; then
		printf '  ok       %-42s %s\n' "$m" "$(total "$m")"
	else
		printf '  MISSING  %s\n' "$m"; fail=1
	fi
done
for m in $moved; do
	if present "$m" && [ "$(total "$m")" != 0 ]; then
		printf '  ok       %-42s %s\n' "$m" "$(total "$m")"
	elif [ "$strict" = 1 ]; then
		printf '  MISSING  %s (absent or zero; --strict)\n' "$m"; fail=1
	else
		printf '  not yet  %s (appears once the workload exercises it)\n' "$m"
	fi
done
# Retention only purges rows older than its windows (a day by default).
m=sagaflow_retention_purged_total
if present "$m"; then printf '  ok       %-42s %s\n' "$m" "$(total "$m")"; else printf '  not yet  %s (nothing old enough purged yet)\n' "$m"; fi
exit $fail
