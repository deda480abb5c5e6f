package orchestrator

import (
	"context"
	"log/slog"
	"sync"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/saga"
)

// Ignored events (late replies, duplicates) can repeat by the thousand for
// one saga (a participant re-answering, a replayed topic). The journal and
// the metrics keep every one; the log keeps the first ignoredLogFirst per
// saga and event, then one in ignoredLogEvery with the count suppressed
// since.
const (
	ignoredLogFirst = 3
	ignoredLogEvery = 100
	// ignoredLogKeys bounds the sampler's memory; when full it starts over.
	ignoredLogKeys = 10_000
)

type ignoredKey struct {
	saga  string
	event string
}

// ignoredSampler decides which ignored events are logged.
type ignoredSampler struct {
	mu   sync.Mutex
	seen map[ignoredKey]int
}

// keep reports whether the n-th ignored event of key is logged, and how
// many were suppressed before it.
func (s *ignoredSampler) keep(key ignoredKey) (bool, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.seen == nil || len(s.seen) >= ignoredLogKeys {
		s.seen = make(map[ignoredKey]int)
	}
	s.seen[key]++
	n := s.seen[key]
	switch {
	case n <= ignoredLogFirst:
		return true, 0
	case (n-ignoredLogFirst)%ignoredLogEvery == 0:
		return true, ignoredLogEvery - 1
	}
	return false, 0
}

// logIgnored logs the journal entries of an ignored decision, sampled.
func (e *Engine) logIgnored(ctx context.Context, in *saga.Instance, d saga.Decision) {
	sagaID := in.ID.String()
	for _, j := range d.Journal {
		ok, suppressed := e.ignored.keep(ignoredKey{saga: sagaID, event: j.Event})
		if !ok {
			continue
		}
		attrs := []slog.Attr{slog.String("saga_id", sagaID), slog.String("step", j.Step), slog.String(message.AttrMessageIDHash, journalIDHash(j.MessageID)),
			slog.String("event", j.Event), slog.String("reason", j.Reason), traceAttr(in)}
		if suppressed > 0 {
			attrs = append(attrs, slog.Int("suppressed_since_last", suppressed))
		}
		e.cfg.Logger.LogAttrs(ctx, slog.LevelInfo, "saga event ignored", attrs...)
	}
}

// journalIDHash is the hash of a journal entry's message id, "" for none.
func journalIDHash(id *uuid.UUID) string {
	if id == nil {
		return ""
	}
	return message.IDHash(*id)
}
