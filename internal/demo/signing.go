package demo

import (
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants/reference"
)

// signing completes the run's record signing: where neither the engine's
// configuration nor cfg gives keys, fresh ones are generated for the run,
// so the demo always signs its commands and its participants' replies.
// It returns the engine's signing and the participants' keys.
func signing(cfg *Config) (orchestrator.Signing, []message.Key, map[string]message.Key, error) {
	g := cfg.Engine.Signing
	cmdKeys, replyKeys := cfg.CommandKeys, cfg.ReplyKeys
	if g.Commands == nil && len(cmdKeys) == 0 {
		k, err := message.GenerateKey("demo-orchestrator")
		if err != nil {
			return g, nil, nil, err
		}
		if g.Commands, err = message.NewSigner(k); err != nil {
			return g, nil, nil, err
		}
		cmdKeys = []message.Key{k}
	}
	if g.Commands == nil && len(cmdKeys) > 0 {
		// The participants' keys given alone: the engine signs with the
		// first, so the participants do not refuse its commands.
		s, err := message.NewSigner(cmdKeys[0])
		if err != nil {
			return g, nil, nil, err
		}
		g.Commands = s
	}
	if g.Replies == nil && len(replyKeys) > 0 {
		// The participants' own keys given alone: the engine checks the
		// replies against them rather than taking every reply.
		g.Replies = &message.Keyring{}
		for name, k := range replyKeys {
			if err := g.Replies.Add(name, k); err != nil {
				return g, nil, nil, err
			}
		}
	}
	if g.Replies == nil && len(replyKeys) == 0 {
		g.Replies = &message.Keyring{}
		replyKeys = map[string]message.Key{}
		for _, name := range reference.AllNames {
			k, err := message.GenerateKey("demo-" + name)
			if err != nil {
				return g, nil, nil, err
			}
			if err := g.Replies.Add(name, k); err != nil {
				return g, nil, nil, err
			}
			replyKeys[name] = k
		}
	}
	return g, cmdKeys, replyKeys, nil
}
