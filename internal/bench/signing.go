package bench

import (
	"crypto/sha256"
	"strconv"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants/reference"
)

// The bench signs like a production install: the orchestrator signs every
// command, each participant verifies it and signs its replies, and the
// engine takes a reply only from its step's participant. The keys are
// derived from the run's seed, so the worker processes of a split run
// (told only the seed) hold the same keys as the driver.

// orchestratorKeyID names the orchestrator's bench key.
const orchestratorKeyID = "bench-orchestrator"

// benchKey is the run's key of owner.
func benchKey(seed int64, owner string) message.Key {
	sum := sha256.Sum256([]byte("sagaflow bench key\x00" + strconv.FormatInt(seed, 10) + "\x00" + owner))
	return message.Key{ID: "bench-" + owner, Secret: sum[:]}
}

// commandKeys are the keys the participants verify commands with; nil
// when c.Unsigned.
func (c Config) commandKeys() []message.Key {
	if c.Unsigned {
		return nil
	}
	return []message.Key{benchKey(c.Seed, orchestratorKeyID)}
}

// replyKey is participant name's own key; zero when c.Unsigned.
func (c Config) replyKey(name string) message.Key {
	if c.Unsigned {
		return message.Key{}
	}
	return benchKey(c.Seed, name)
}

// signing is the engine's signing for the participants names; zero (off)
// when c.Unsigned.
func (c Config) signing(names []string) (orchestrator.Signing, error) {
	if c.Unsigned {
		return orchestrator.Signing{}, nil
	}
	s, err := message.NewSigner(benchKey(c.Seed, orchestratorKeyID))
	if err != nil {
		return orchestrator.Signing{}, err
	}
	ring := &message.Keyring{}
	for _, n := range names {
		if err := ring.Add(n, benchKey(c.Seed, n)); err != nil {
			return orchestrator.Signing{}, err
		}
	}
	return orchestrator.Signing{Commands: s, Replies: ring}, nil
}

// replyKeys are the reference participants' own keys; nil when
// c.Unsigned.
func replyKeys(c Config) map[string]message.Key {
	if c.Unsigned {
		return nil
	}
	m := make(map[string]message.Key, len(reference.Names))
	for _, n := range reference.Names {
		m[n] = benchKey(c.Seed, n)
	}
	return m
}
