// Package conformance is the wire-contract conformance kit: it checks that a
// participant service, in any language, does every participant duty of the
// wire contract (docs/DESIGN.md, "The wire contract"; how to run it:
// docs/conformance.md).
//
// A participant's own Go test runs it against the participant's binary,
// which implements the conformance step (StepName):
//
//	func TestConformance(t *testing.T) {
//		conformance.Run(t, conformance.Config{
//			Participant: "hotel",
//			Command:     "go run ./cmd/hotel-participant",
//		})
//	}
//
// Every duty the participant breaks is a test error. [Verify] returns the
// [Report] instead; `orchestrator conformance --participant NAME --cmd
// COMMAND` prints it, a line per check.
//
// The kit starts an embedded Kafka-protocol broker (internal/devbroker), creates
// a scratch database on a Postgres server (dropped at the end), creates the
// participant's command topic, its dead-letter topic and a reply topic, and
// starts the participant as a child process (its own process group, killed
// at the end) with SAGAFLOW_KAFKA_BROKERS, SAGAFLOW_DATABASE_URL,
// SAGAFLOW_PARTICIPANT and SAGAFLOW_REPLY_TOPIC in its environment. Once it
// answers, the kit produces commands of the conformance step (StepName, see
// step.go) straight to the command topic, keyed by aggregate id with the
// Java-compatible murmur2 partitioner and the wire headers, and reads what
// comes back on the reply topic, the dead-letter topic and every other
// topic. Each check is one line of the Report: PASS or FAIL with why.
//
// What the kit can see is only what the wire shows: the conformance step
// answers, in its success payload, how many effect rows its key has after
// the execution, so an effect done twice shows as a count of two. A check
// that waits for something not to happen (a poison record executed, a
// second answer to one message id) does not sleep: it sends a good command
// behind it on the same partition and waits for that one's answer, since a
// participant handles one partition in order.
//
// The Go side of the step is internal/goparticipant (run it with
// `orchestrator conformance go-participant`); examples/node-participant is
// the Node.js one.
package conformance
