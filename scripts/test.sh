#!/usr/bin/env bash
# The test suite: vet, then unit and integration tests with -race against
# real Postgres and the Kafka protocol (an in-process broker, or real brokers
# from KAFKA_BROKERS).
#
# Needs: Postgres on 127.0.0.1:5432 (user postgres, trust; or set
# SAGAFLOW_TEST_DATABASE_URL), Debian's chromium (the status page is tested
# in headless Chromium) and promtool (from Debian's prometheus package; the
# metrics exposition is checked with it), and Node 20 with npm (the Node.js
# participant is installed with npm ci and run against the conformance kit).
# On a Debian machine where this runs as root, missing packages are installed.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v chromium >/dev/null || missing+=(chromium)
command -v promtool >/dev/null || missing+=(prometheus)
if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "test.sh: installing ${missing[*]} from Debian's packages"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "test.sh: missing ${missing[*]}: install them (apt-get install ${missing[*]}); the tests that need them fail without" >&2
  fi
fi

go vet ./...
go test -race -count=1 -timeout 15m ./...
