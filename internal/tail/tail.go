// Package tail keeps the last bytes a process wrote (a server's log, a
// child's output), for error messages.
package tail

import (
	"strings"
	"sync"
)

// Buffer keeps the last max bytes written to it. It is safe for
// concurrent use.
type Buffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

// New returns a Buffer that keeps the last max bytes.
func New(max int) *Buffer { return &Buffer{max: max} }

func (t *Buffer) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if len(t.buf) > t.max {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-t.max:]...)
	}
	return len(b), nil
}

// String is what the buffer holds, without surrounding white space.
func (t *Buffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}

// Reset empties the buffer.
func (t *Buffer) Reset() {
	t.mu.Lock()
	t.buf = t.buf[:0]
	t.mu.Unlock()
}
