package saga

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"
)

// StepOverride changes a step's timeout, deadline, accepted deadline and
// retry policy from configuration, without recompiling. Zero fields keep
// the definition's value (a defaulted deadline follows an overridden
// timeout).
type StepOverride struct {
	Timeout          time.Duration
	Deadline         time.Duration
	AcceptedDeadline time.Duration
	Retry            RetryPolicy
}

// Registry holds the saga definitions a process knows, by type and version.
// It is safe for concurrent use.
type Registry struct {
	mu     sync.RWMutex
	defs   map[string]map[int]*Def
	latest map[string]int
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{defs: map[string]map[int]*Def{}, latest: map[string]int{}}
}

// ErrAlreadyRegistered is returned when a type and version is registered twice.
var ErrAlreadyRegistered = errors.New("saga definition already registered")

// Register adds d. Several versions of one type may be registered: new
// sagas use the highest, running ones keep theirs.
func (r *Registry) Register(d *Def) error {
	if d == nil {
		return errors.New("saga registry: Register(nil)")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.defs[d.Name] == nil {
		r.defs[d.Name] = map[int]*Def{}
	}
	if _, ok := r.defs[d.Name][d.Version]; ok {
		return fmt.Errorf("saga registry: %q version %d: %w", d.Name, d.Version, ErrAlreadyRegistered)
	}
	r.defs[d.Name][d.Version] = d
	if d.Version > r.latest[d.Name] {
		r.latest[d.Name] = d.Version
	}
	return nil
}

// Override applies o to step of every registered version of sagaType.
func (r *Registry) Override(sagaType, step string, o StepOverride) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	vs, ok := r.defs[sagaType]
	if !ok {
		return fmt.Errorf("saga registry: override %q/%q: %w", sagaType, step, ErrUnknownType)
	}
	found := false
	for v, old := range vs {
		i, ok := old.index[step]
		if !ok {
			continue
		}
		found = true
		// Copy on write: engines hold the *Def they looked up without the
		// registry's lock, so the registered value is never mutated.
		d := *old
		d.Steps = append([]StepDef(nil), old.Steps...)
		vs[v] = &d
		s := &d.Steps[i]
		if o.Timeout > 0 {
			s.Timeout = o.Timeout
		}
		if o.Deadline > 0 {
			s.Deadline = o.Deadline
		}
		if o.AcceptedDeadline > 0 {
			s.AcceptedDeadline = o.AcceptedDeadline
		}
		p := s.Retry
		if o.Retry.InitialInterval > 0 {
			p.InitialInterval = o.Retry.InitialInterval
		}
		if o.Retry.MaxInterval > 0 {
			p.MaxInterval = o.Retry.MaxInterval
		}
		if o.Retry.Multiplier >= 1 {
			p.Multiplier = o.Retry.Multiplier
		}
		if o.Retry.MaxAttempts > 0 {
			p.MaxAttempts = o.Retry.MaxAttempts
		}
		s.Retry = p.withDefaults(s.Kind)
		s.CompRetry.InitialInterval, s.CompRetry.MaxInterval, s.CompRetry.Multiplier = s.Retry.InitialInterval, s.Retry.MaxInterval, s.Retry.Multiplier
	}
	if !found {
		return fmt.Errorf("saga registry: override %q/%q: %w", sagaType, step, ErrUnknownStep)
	}
	return nil
}

// SetMaxSends sets the send bound (Def.MaxSends) of every registered
// definition, all versions: n > 0 bounds, n < 0 removes the bound, 0
// leaves the definitions' own.
func (r *Registry) SetMaxSends(n int) {
	if n == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, vs := range r.defs {
		for v, old := range vs {
			d := *old // copy on write, as Override
			d.MaxSends = max(n, 0)
			vs[v] = &d
		}
	}
}

// Latest returns the newest version of sagaType.
func (r *Registry) Latest(sagaType string) (*Def, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	v, ok := r.latest[sagaType]
	if !ok {
		return nil, false
	}
	return r.defs[sagaType][v], true
}

// Lookup returns sagaType at version.
func (r *Registry) Lookup(sagaType string, version int) (*Def, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	d, ok := r.defs[sagaType][version]
	return d, ok
}

// Types lists the registered saga types, sorted.
func (r *Registry) Types() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]string, 0, len(r.latest))
	for t := range r.latest {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// Participants lists every participant named by a registered definition.
func (r *Registry) Participants() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	seen := map[string]bool{}
	var out []string
	for _, vs := range r.defs {
		for _, d := range vs {
			for _, s := range d.Steps {
				if s.Participant != "" && !seen[s.Participant] {
					seen[s.Participant] = true
					out = append(out, s.Participant)
				}
			}
		}
	}
	sort.Strings(out)
	return out
}
