#!/usr/bin/env bash
# The test suite: gofmt, vet and staticcheck, then unit and integration tests with -race against
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

unformatted=$(gofmt -l .)
if [ -n "$unformatted" ]; then
  echo "test.sh: gofmt -l lists files that are not formatted:" >&2
  echo "$unformatted" >&2
  exit 1
fi
go vet ./...
# staticcheck, pinned, from the Go module proxy (not a dependency of the module).
go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
go test -race -count=1 -timeout 15m ./...
