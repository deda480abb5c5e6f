package cli

import (
	"fmt"
	"log/slog"
	"strings"

	"github.com/sagaflow/sagaflow/internal/devbroker"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
)

// SecurityConfig is security.*: the keys commands and replies are signed
// with (docs/DESIGN.md, "Signed records").
type SecurityConfig struct {
	// OrchestratorKeys is "id:secret,..."; OrchestratorKeyID the one
	// that signs (default the first).
	OrchestratorKeys, OrchestratorKeyID string
	// ParticipantKeys is "participant:id:secret,...".
	ParticipantKeys                             string
	AllowUnsignedReplies, AllowUnsignedCommands bool
	AllowUnsignedRepliesFrom                    []string

	// parsed by parse (Load's validate).
	orch     []message.Key
	active   message.Key
	partKeys map[string][]message.Key
}

// parse reads the keys; every error names its key and never quotes a
// secret.
func (s *SecurityConfig) parse() error {
	var err error
	if s.orch, err = message.ParseKeys(s.OrchestratorKeys); err != nil {
		return fmt.Errorf("config: security.orchestrator_keys: %w", err)
	}
	s.active = message.Key{}
	switch {
	case s.OrchestratorKeyID != "" && len(s.orch) == 0:
		return fmt.Errorf("config: security.orchestrator_key_id: %q names no key: security.orchestrator_keys is empty", s.OrchestratorKeyID)
	case s.OrchestratorKeyID != "":
		for _, k := range s.orch {
			if k.ID == s.OrchestratorKeyID {
				s.active = k
			}
		}
		if s.active.ID == "" {
			return fmt.Errorf("config: security.orchestrator_key_id: %q is not the id of a key of security.orchestrator_keys", s.OrchestratorKeyID)
		}
	case len(s.orch) > 0:
		s.active = s.orch[0]
	}
	ring := &message.Keyring{}
	for _, k := range s.orch {
		if err := ring.Add("the orchestrator", k); err != nil {
			return fmt.Errorf("config: security.orchestrator_keys: %w", err)
		}
	}
	owned, err := message.ParseOwnedKeys(s.ParticipantKeys)
	if err != nil {
		return fmt.Errorf("config: security.participant_keys: %w", err)
	}
	for name, ks := range owned {
		for _, k := range ks {
			if err := ring.Add(name, k); err != nil {
				return fmt.Errorf("config: security.participant_keys: %w", err)
			}
		}
	}
	s.partKeys = owned
	return nil
}

// engine is the engine's part of the signing: the active orchestrator key
// signs commands; replies are checked once participant keys are
// configured.
func (s *SecurityConfig) engine() orchestrator.Signing {
	var g orchestrator.Signing
	if s.active.ID != "" {
		g.Commands, _ = message.NewSigner(s.active) // checked by parse
	}
	if len(s.partKeys) > 0 {
		g.Replies = &message.Keyring{}
		for name, ks := range s.partKeys {
			for _, k := range ks {
				_ = g.Replies.Add(name, k) // checked by parse
			}
		}
		g.AllowUnsigned, g.AllowUnsignedFrom = s.AllowUnsignedReplies, s.AllowUnsignedRepliesFrom
	}
	return g
}

// replyKeys are the keys the reference participants sign with: each
// participant's first.
func (s *SecurityConfig) replyKeys() map[string]message.Key {
	out := map[string]message.Key{}
	for name, ks := range s.partKeys {
		out[name] = ks[0]
	}
	return out
}

// warn logs what is not authenticated (a process still runs: an
// existing install upgrades without keys, then adds them).
func (s *SecurityConfig) warn(log *slog.Logger, participants bool) {
	switch {
	case participants && len(s.orch) == 0:
		log.Warn("commands are not verified: anyone who can write a command topic makes a participant act; set security.orchestrator_keys")
	case participants && s.AllowUnsignedCommands:
		log.Warn("unsigned commands are executed (security.allow_unsigned_commands): end the migration window once the orchestrator signs")
	case !participants && len(s.orch) == 0:
		log.Warn("commands are unsigned: participants cannot tell them from forged ones; set security.orchestrator_keys")
	}
	switch {
	case !participants && len(s.partKeys) == 0:
		log.Warn("replies are not authenticated: anyone who can write the reply topic moves sagas; set security.participant_keys")
	case !participants && (s.AllowUnsignedReplies || len(s.AllowUnsignedRepliesFrom) > 0):
		log.Warn("unsigned replies are taken (security.allow_unsigned_replies): end the migration window once every participant signs",
			slog.Any("from", s.AllowUnsignedRepliesFrom))
	case participants && len(s.partKeys) == 0:
		log.Warn("replies are unsigned: set security.participant_keys")
	}
}

// devBrokerPrincipals reads dev-broker's --principals ("user:password,...")
// and gives each the ACLs of the deployment cfg describes (topic prefix,
// reply topic, orchestrator group, the registered participants).
func devBrokerPrincipals(cfg *Config, flag string) ([]devbroker.Principal, error) {
	if strings.TrimSpace(flag) == "" {
		return nil, nil
	}
	reg, err := cfg.registry()
	if err != nil {
		return nil, err
	}
	layout := devbroker.Layout{TopicPrefix: cfg.Kafka.TopicPrefix, ReplyTopic: cfg.Kafka.ReplyTopic,
		OrchestratorGroup: cfg.Orchestrator.GroupID, Participants: reg.Participants(),
		OutcomeTopic: cfg.Kafka.OutcomeTopic, StartTopic: cfg.Kafka.StartTopic, EventTopic: cfg.Kafka.EventTopic}
	var out []devbroker.Principal
	for item := range strings.SplitSeq(flag, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		user, pass, ok := strings.Cut(item, ":")
		if !ok || user == "" || pass == "" {
			return nil, fmt.Errorf("dev-broker --principals: item %d: want user:password", len(out)+1)
		}
		out = append(out, devbroker.Principal{User: user, Password: pass, ACLs: devbroker.SagaflowACLs(layout, user)})
	}
	return out, nil
}

func joinACLs(acls []devbroker.ACL) string {
	s := make([]string, len(acls))
	for i, a := range acls {
		s[i] = a.String()
	}
	return strings.Join(s, "; ")
}
