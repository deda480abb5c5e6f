// Package external is the safe way for a participant's step to call an
// outside system (a payment provider, a carrier): never inside a database
// transaction, never twice.
//
// In the step's handler, record the intent and answer accepted, in the
// handler's transaction (Caller.Intend): the call's request and an
// idempotency key derived from the step's barrier key are stored with the
// barrier row. After the commit a worker of the participant (Caller.Run)
// claims due calls and makes them outside any transaction, with that key,
// at most Config.MaxInFlight at once, with a timeout per call, retries
// with backoff for transient errors, and a circuit that stops calling a
// provider that keeps failing for a cooldown. The provider's definite
// answer settles the step (participants.Participant.Complete or Fail) in
// the transaction that records it. A crash at any point resumes from the
// recorded intent: a claim is a lease, and an expired lease is claimed
// again, the call made again with the same key, which the provider
// answers with its first result.
//
// The provider must honour the idempotency key; the step must tolerate a
// cancellation (a compensation that meets the accepted step when it was
// accepted cancellable: the provider's later answer is then recorded as
// abandoned, for the participant's own clean-up).
package external
