// Package faults holds the failure-window tests of sagaflow: one named test
// per row of the failure-window table in docs/DESIGN.md, the late and
// stray reply tests, bad input on the reply and command topics, and the
// two-replica test. Each test runs the real pipeline in-process (Postgres,
// the Kafka protocol, the orchestrator service and the reference
// participants as separate component groups with their own pools), injects
// its fault by stopping a component between steps, re-producing consumed
// records or rewriting the outbox as a crash would leave it, and then checks
// the invariants from the databases with workload.CheckPlan plus the
// window's own assertion. The windows a parallel group, a wait or a cancel
// opens run book-trip trips (groups_test.go).
//
// Run them with: go test -race -run 'TestWindow' ./faults/
package faults
