// Package flaky injects deterministic transient failures into participant
// handlers, for demos, benchmarks and fault tests.
//
// Options.Fails decides, from the command's step, saga and attempt and the
// configured seed, whether an attempt should answer
// RetryLater(orderapi.ReasonTransient) instead of doing its work. The
// decision is a pure function of those inputs (see Draw), so a run with the
// same seed fails the same attempts, and a later attempt of the same saga
// draws afresh and can succeed.
package flaky
