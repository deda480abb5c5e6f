package devbroker

import (
	"cmp"
	"fmt"
	"strings"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Principal is a SASL user of a broker that enforces ACLs: it may do what
// its ACLs allow and nothing else (Config.Principals).
type Principal struct {
	User, Password string
	ACLs           []ACL
}

// ACL allows a principal operations on a resource.
type ACL struct {
	// Resource is "topic", "group" or "cluster".
	Resource string
	// Name of the topic or group ("kafka-cluster" for the cluster);
	// Prefixed: every name starting with it.
	Name     string
	Prefixed bool
	// Operations: "read", "write", "create", "describe" (read and write
	// imply describe).
	Operations []string
}

func (a ACL) String() string {
	how := ""
	if a.Prefixed {
		how = " (prefix)"
	}
	return fmt.Sprintf("%s %s %s%s", strings.Join(a.Operations, ","), a.Resource, a.Name, how)
}

var resources = map[string]kmsg.ACLResourceType{
	"topic": kmsg.ACLResourceTypeTopic, "group": kmsg.ACLResourceTypeGroup, "cluster": kmsg.ACLResourceTypeCluster,
}

var operations = map[string]kmsg.ACLOperation{
	"read": kmsg.ACLOperationRead, "write": kmsg.ACLOperationWrite, "create": kmsg.ACLOperationCreate, "describe": kmsg.ACLOperationDescribe,
}

// kfakeACLs converts p's ACLs; an error names the principal and the ACL.
func (p Principal) kfakeACLs() ([]kfake.ACL, error) {
	var out []kfake.ACL
	for _, a := range p.ACLs {
		res, ok := resources[a.Resource]
		if !ok || a.Name == "" {
			return nil, fmt.Errorf("devbroker: principal %s: ACL %q: want a resource topic, group or cluster and a name", p.User, a)
		}
		pat := kmsg.ACLResourcePatternTypeLiteral
		if a.Prefixed {
			pat = kmsg.ACLResourcePatternTypePrefixed
		}
		for _, op := range a.Operations {
			o, ok := operations[op]
			if !ok {
				return nil, fmt.Errorf("devbroker: principal %s: ACL %q: operation %q: want read, write, create or describe", p.User, a, op)
			}
			out = append(out, kfake.ACL{Resource: res, Name: a.Name, Pattern: pat, Operation: o, Allow: true})
		}
	}
	return out, nil
}

// Layout is where a sagaflow deployment's records go: what the ACLs of
// its principals (SagaflowPrincipals) are made of. Zero fields take the
// defaults of the binary.
type Layout struct {
	// TopicPrefix is put before "<participant>.commands" (kafka.topic_prefix).
	TopicPrefix string
	// ReplyTopic is the reply topic (kafka.reply_topic; default
	// saga.replies).
	ReplyTopic string
	// OrchestratorGroup is the reply consumer's group
	// (orchestrator.group_id; default sagaflow-orchestrator); the intake
	// consumer's is OrchestratorGroup + ".intake".
	OrchestratorGroup string
	// OutcomeTopic, StartTopic and EventTopic are the orchestrator's
	// saga-level topics (kafka.outcome_topic, kafka.start_topic,
	// kafka.event_topic; defaults saga.outcomes, saga.starts, saga.events).
	OutcomeTopic, StartTopic, EventTopic string
	// DLQSuffix ends the dead-letter topics (default .dlq).
	DLQSuffix string
	// Participants are the participants the orchestrator sends commands
	// to (its registered definitions').
	Participants []string
}

func (l Layout) withDefaults() Layout {
	l.ReplyTopic = cmp.Or(l.ReplyTopic, "saga.replies")
	l.OrchestratorGroup = cmp.Or(l.OrchestratorGroup, "sagaflow-orchestrator")
	l.OutcomeTopic = cmp.Or(l.OutcomeTopic, "saga.outcomes")
	l.StartTopic = cmp.Or(l.StartTopic, "saga.starts")
	l.EventTopic = cmp.Or(l.EventTopic, "saga.events")
	l.DLQSuffix = cmp.Or(l.DLQSuffix, ".dlq")
	return l
}

// OrchestratorName is the principal SagaflowACLs gives the orchestrator's
// ACLs; any other name is a participant's.
const OrchestratorName = "orchestrator"

// SagaflowACLs are the ACLs of principal user in layout (the table of
// docs/operations.md, "Kafka ACLs"): the orchestrator's when user is
// OrchestratorName, else those of the participant of that name.
//
// The orchestrator reads the reply topic in its group and the start and
// event topics in its intake group, writes the command topics of
// layout.Participants, the outcome topic, the dead-letter topics of the
// topics it reads and those topics themselves (a redriven dead record),
// and creates them and the dead-letter topics of the command and outcome
// topics (at start). A participant reads its own command topic in its group
// ("<prefix><name>", the SDK's and the reference set's), writes the reply
// topic, its command topic's dead-letter topic and its own command topic
// (a redriven dead command keeps its orchestrator signature), and creates
// them. Nobody but the orchestrator reads the reply topic or writes another
// participant's command topic.
func SagaflowACLs(layout Layout, user string) []ACL {
	l := layout.withDefaults()
	if user == OrchestratorName {
		acls := []ACL{
			{Resource: "group", Name: l.OrchestratorGroup, Operations: []string{"read"}},
			{Resource: "group", Name: l.OrchestratorGroup + ".intake", Operations: []string{"read"}},
			{Resource: "topic", Name: l.OutcomeTopic, Operations: []string{"write", "create"}},
			{Resource: "topic", Name: l.OutcomeTopic + l.DLQSuffix, Operations: []string{"create"}},
		}
		for _, t := range []string{l.ReplyTopic, l.StartTopic, l.EventTopic} {
			acls = append(acls, ACL{Resource: "topic", Name: t, Operations: []string{"read", "write", "create"}},
				ACL{Resource: "topic", Name: t + l.DLQSuffix, Operations: []string{"write", "create"}})
		}
		for _, p := range l.Participants {
			cmd := l.TopicPrefix + p + ".commands"
			acls = append(acls, ACL{Resource: "topic", Name: cmd, Operations: []string{"write", "create"}},
				ACL{Resource: "topic", Name: cmd + l.DLQSuffix, Operations: []string{"create"}})
		}
		return acls
	}
	cmd := l.TopicPrefix + user + ".commands"
	return []ACL{
		{Resource: "topic", Name: cmd, Operations: []string{"read", "write", "create"}},
		{Resource: "group", Name: l.TopicPrefix + user, Operations: []string{"read"}},
		{Resource: "topic", Name: cmd + l.DLQSuffix, Operations: []string{"write", "create"}},
		{Resource: "topic", Name: l.ReplyTopic, Operations: []string{"write", "create"}},
	}
}
