package flaky

import (
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
)

// Options configures failure injection. The zero value never injects a
// failure.
type Options struct {
	// FailRate is the probability, in [0, 1], that an attempt answers
	// RetryLater(orderapi.ReasonTransient) without doing anything.
	FailRate float64
	// Seed makes the injected failures reproducible: the same seed, saga and
	// attempt always draw the same way.
	Seed int64
}

// Validate returns an error naming Options.FailRate unless it is a
// probability in [0, 1]. Callers prefix it with their own name.
func (o Options) Validate() error {
	if math.IsNaN(o.FailRate) || o.FailRate < 0 || o.FailRate > 1 {
		return fmt.Errorf("Options.FailRate is %v, want a probability in [0, 1]", o.FailRate)
	}
	return nil
}

// Fails reports whether this attempt of cmd fails transiently.
func (o Options) Fails(cmd message.Command) bool {
	return o.FailRate > 0 && Draw(o.Seed, cmd.Step, cmd.SagaID, cmd.Attempt) < o.FailRate
}

// Draw maps (seed, step, saga, attempt) to a number in [0, 1): an FNV-1a
// hash of the inputs, mixed by the splitmix64 finaliser so every output bit
// depends on every input bit.
func Draw(seed int64, step string, saga uuid.UUID, attempt int) float64 {
	h := fnv.New64a()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(seed))
	h.Write(b[:])
	h.Write([]byte(step))
	h.Write(saga[:])
	binary.BigEndian.PutUint64(b[:], uint64(attempt))
	h.Write(b[:])
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return float64(x>>11) / (1 << 53)
}
