#!/usr/bin/env bash
# The test suite: vet, unit + integration tests with -race against real
# Postgres and the Kafka protocol, micro-benchmarks once so they keep compiling.
set -euo pipefail
cd "$(dirname "$0")/.."
go vet ./...
go test -race -count=1 -timeout 15m ./...
