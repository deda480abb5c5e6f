package participants_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/segmentio/kafka-go"
	"go.uber.org/goleak"
)

// Run must not leak goroutines: every consumer, relay and test broker is
// gone once the tests finish.
//
// The inbox consumer's dead-letter writer uses kafka-go's shared
// DefaultTransport, whose idle connections outlive the writer; they are
// closed here before the check, so anything else still running fails it.
func TestMain(m *testing.M) {
	code := m.Run()
	if tr, ok := kafka.DefaultTransport.(*kafka.Transport); ok {
		tr.CloseIdleConnections()
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
