#!/usr/bin/env bash
# The machine's reference speed for performance runs: pgbench with 8
# clients, one INSERT per transaction, for 8 seconds, against the local
# Postgres. Prints the transactions per second. Run it before and after a
# bench pair and report it with the bench's figures.
set -euo pipefail
db=${PGBENCH_DB:-sagaflow_pgbench}
conn=(-h 127.0.0.1 -p 5432 -U postgres)
psql "${conn[@]}" -d postgres -qtAc "SELECT 1 FROM pg_database WHERE datname = '$db'" | grep -q 1 ||
  psql "${conn[@]}" -d postgres -qc "CREATE DATABASE $db"
psql "${conn[@]}" -d "$db" -qc 'CREATE TABLE IF NOT EXISTS ref (id bigserial PRIMARY KEY, v int NOT NULL)'
script=$(mktemp)
trap 'rm -f "$script"' EXIT
echo 'INSERT INTO ref (v) VALUES (1);' >"$script"
pgbench "${conn[@]}" -n -M prepared -c 8 -j 2 -T "${PGBENCH_SECONDS:-8}" -f "$script" "$db" |
  awk '/^tps/ {print $3}'
psql "${conn[@]}" -d "$db" -qc 'TRUNCATE ref'
