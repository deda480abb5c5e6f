package orchestrator

import "github.com/sagaflow/sagaflow/saga"
import "testing"

func TestIgnoredSamplerKeepsTheFirstThenOneInEvery(t *testing.T) {
	var s ignoredSampler
	a, b := ignoredKey{"s1", saga.JournalLate}, ignoredKey{"s2", saga.JournalLate}
	kept, suppressed := 0, 0
	for range 1003 {
		if ok, n := s.keep(a); ok {
			kept++
			suppressed += n
		}
	}
	// 3 first, then one at each 100 more: 3 + 10.
	if kept != 13 || suppressed != 10*(ignoredLogEvery-1) {
		t.Fatalf("kept %d lines reporting %d suppressed, want 13 and %d", kept, suppressed, 10*(ignoredLogEvery-1))
	}
	if ok, _ := s.keep(b); !ok {
		t.Fatal("another saga's first ignored event was not kept")
	}
	for i := range ignoredLogKeys + 1 {
		s.keep(ignoredKey{saga: string(rune(i)), event: "x"})
	}
	if len(s.seen) > ignoredLogKeys {
		t.Fatalf("the sampler holds %d keys, want at most %d", len(s.seen), ignoredLogKeys)
	}
}
