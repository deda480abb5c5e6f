package conformance

// The conformance step, as the wire contract defines it (docs/DESIGN.md,
// "The conformance step"). A participant under test handles it on its
// command topic, in its own schema, behind its barrier.

// Names of the conformance step.
const (
	// StepName is the step the kit sends commands for.
	StepName = "conformance"
	// SagaType is the saga_type of the kit's commands.
	SagaType = "conformance"
	// ModeSucceed records one effect row for the key and answers success
	// with Output.
	ModeSucceed = "succeed"
	// ModeFail answers failure with ReasonFail and leaves nothing.
	ModeFail = "fail"
	// ModeRetry answers retry with ReasonRetry and records nothing.
	ModeRetry = "retry"
	// ModeAccept records nothing and answers accepted (outcome accepted,
	// not cancellable): the step is settled later by a FinishStepName
	// command naming it.
	ModeAccept = "accept"
	// FinishStepName is the step whose forward settles an accepted
	// conformance step from another code path (a handler of another
	// command, in its transaction): its payload is a Finish. With outcome
	// success it records one effect row for the key and completes the
	// accepted step with Output; with failure it fails it with ReasonFail.
	// It answers success with Output (the key's effect rows), or failure
	// ReasonNotAccepted when the step named is not accepted (settled
	// already, cancelled, never accepted): then it changes nothing.
	FinishStepName = "conformance-finish"
	// ReasonNotAccepted is the reason of a finish that found no accepted
	// step to settle.
	ReasonNotAccepted = "not_accepted"
	// ReasonFail is the reason of a ModeFail answer.
	ReasonFail = "conformance_fail"
	// ReasonRetry is the reason of a ModeRetry answer.
	ReasonRetry = "conformance_retry"
	// TopicPrefix starts the names of the kit's own topics: the reply
	// topic it gives the participant (SAGAFLOW_REPLY_TOPIC),
	// "conformance.<participant>.replies", and a topic that exists and that
	// no participant may write to, "conformance.<participant>.elsewhere"
	// (the kit names it as the reply_to of a command that must be
	// dead-lettered).
	TopicPrefix = "conformance."
)

// Environment variables the participant under test reads.
const (
	EnvBrokers     = "SAGAFLOW_KAFKA_BROKERS"
	EnvDatabaseURL = "SAGAFLOW_DATABASE_URL"
	EnvParticipant = "SAGAFLOW_PARTICIPANT"
	EnvReplyTopic  = "SAGAFLOW_REPLY_TOPIC"
	// EnvOrchestratorKeys are the keys the participant verifies commands
	// with ("id:secret", the Go binary's security.orchestrator_keys);
	// EnvParticipantKeys holds its own ("participant:id:secret", as
	// security.participant_keys), which it signs its replies with. The kit
	// makes fresh ones for each run.
	EnvOrchestratorKeys = "SAGAFLOW_SECURITY_ORCHESTRATOR_KEYS"
	EnvParticipantKeys  = "SAGAFLOW_SECURITY_PARTICIPANT_KEYS"
)

// Input is the payload of a conformance command: the forward's key and
// mode; a compensation carries the key only (Mode empty).
type Input struct {
	Key  string `json:"key"`
	Mode string `json:"mode,omitempty"`
}

// Finish is the payload of a FinishStepName forward: the key and the saga
// of the accepted conformance step to settle, and how (message.Success or
// message.Failure).
type Finish struct {
	Key     string `json:"key"`
	Saga    string `json:"saga_id"`
	Outcome string `json:"outcome"`
}

// Output is the payload of a successful forward or compensation: the key
// and the number of effect rows for it after this execution.
type Output struct {
	Key     string `json:"key"`
	Effects int    `json:"effects"`
}
