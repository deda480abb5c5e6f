package flaky

import (
	"math"
	"strings"
	"testing"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
)

// TestDrawIsPinned pins values computed by the draw function the shipping
// and points packages had before it moved here: a change to the hash would
// change which attempts every seeded run fails.
func TestDrawIsPinned(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		seed    int64
		step    string
		saga    string
		attempt int
		want    float64
	}{
		{0, "create-shipment", "00000000-0000-0000-0000-000000000000", 0, 0.14029954143574486},
		{7, "create-shipment", "6f1c2a3b-4d5e-4f60-8a71-92b3c4d5e6f7", 1, 0.9215653366919105},
		{42, "award-points", "6f1c2a3b-4d5e-4f60-8a71-92b3c4d5e6f7", 3, 0.9198356549407842},
		{-1, "charge-payment", "ffffffff-ffff-ffff-ffff-ffffffffffff", 1000, 0.25650040379596706},
	} {
		if got := Draw(c.seed, c.step, uuid.MustParse(c.saga), c.attempt); got != c.want {
			t.Errorf("Draw(%d, %q, %s, %d) = %v, want %v", c.seed, c.step, c.saga, c.attempt, got, c.want)
		}
	}
}

func cmd(saga uuid.UUID, attempt int) message.Command {
	return message.Command{SagaID: saga, Step: "create-shipment", Action: message.Forward, Attempt: attempt}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, ok := range []float64{0, 0.3, 1} {
		if err := (Options{FailRate: ok}).Validate(); err != nil {
			t.Errorf("FailRate %v: %v", ok, err)
		}
	}
	for _, bad := range []float64{-0.1, 1.5, math.NaN(), math.Inf(1)} {
		err := (Options{FailRate: bad}).Validate()
		if err == nil || !strings.Contains(err.Error(), "Options.FailRate") {
			t.Errorf("FailRate %v: err = %v, want an error naming Options.FailRate", bad, err)
		}
	}
}

func TestFailsExtremes(t *testing.T) {
	t.Parallel()
	always, never := Options{FailRate: 1, Seed: 7}, Options{Seed: 7}
	for i := range 1000 {
		c := cmd(uuid.New(), i+1)
		if !always.Fails(c) {
			t.Fatalf("FailRate 1 did not fail attempt %d", i+1)
		}
		if never.Fails(c) {
			t.Fatalf("FailRate 0 failed attempt %d", i+1)
		}
	}
}

func TestFailsIsProportionalAndDeterministic(t *testing.T) {
	t.Parallel()
	const rate, sagas, attempts = 0.3, 250, 4
	o1, o2 := Options{FailRate: rate, Seed: 42}, Options{FailRate: rate, Seed: 42}
	other := Options{FailRate: rate, Seed: 43}
	failed, differ := 0, 0
	for range sagas {
		saga := uuid.New()
		for attempt := 1; attempt <= attempts; attempt++ {
			c := cmd(saga, attempt)
			got := o1.Fails(c)
			if got != o2.Fails(c) {
				t.Fatalf("same seed drew differently for saga %s attempt %d", saga, attempt)
			}
			if got != (Draw(42, c.Step, saga, attempt) < rate) {
				t.Fatalf("Fails disagrees with Draw for saga %s attempt %d", saga, attempt)
			}
			if got != other.Fails(c) {
				differ++
			}
			if got {
				failed++
			}
		}
	}
	// 1,000 draws at p = 0.3: mean 300, standard deviation about 14.5.
	if failed < 230 || failed > 370 {
		t.Fatalf("FailRate %.1f failed %d of %d attempts, want about 300", rate, failed, sagas*attempts)
	}
	if differ == 0 {
		t.Fatal("another seed drew exactly the same 1,000 times")
	}
}
