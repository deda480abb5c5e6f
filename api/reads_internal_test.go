package api

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/orchestrator"
)

// With every read slot taken, a read answers 503 naming
// http.max_concurrent_reads (with Retry-After) once its deadline passes;
// the health endpoints do not wait for a slot.
func TestReadSlotsFullAnswers503(t *testing.T) {
	t.Parallel()
	s, err := New((*orchestrator.Engine)(nil), &Config{MaxConcurrentReads: 1, HandlerTimeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	s.reads <- struct{}{} // the one slot, held
	start := time.Now()
	w := httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest("GET", "/sagas", nil))
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "http.max_concurrent_reads") || w.Header().Get("Retry-After") == "" {
		t.Fatalf("GET /sagas with the read slots full = %d %q %s; want 503 naming http.max_concurrent_reads with Retry-After", w.Code, w.Header(), w.Body)
	}
	if took := time.Since(start); took < 150*time.Millisecond {
		t.Errorf("the read answered 503 after %s, without waiting for a slot until its deadline", took)
	}
	w = httptest.NewRecorder()
	s.ServeHTTP(w, httptest.NewRequest("GET", "/healthz", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("GET /healthz with the read slots full = %d %s", w.Code, w.Body)
	}
}
