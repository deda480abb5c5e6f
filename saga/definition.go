package saga

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"time"
)

// Kind is a step's role relative to the saga's point of no return.
type Kind string

const (
	// Compensable steps run before the pivot and have a compensation.
	Compensable Kind = "compensable"
	// Pivot is the single point of no return: once it succeeds the saga
	// only goes forward.
	Pivot Kind = "pivot"
	// Retryable steps run after the pivot and are retried until they succeed.
	Retryable Kind = "retryable"
	// Wait steps send nothing: they wait for a named external event (an
	// approval, a payment webhook) sent to the saga (Engine.SendEvent, the
	// events API). Before the pivot a refused event, or a deadline with
	// OnDeadline WaitCompensate, compensates the saga; after it a wait's
	// deadline must fail it (WaitFail) and a refusal fails it.
	Wait Kind = "wait"
)

// WaitDeadline says what a wait step's deadline means.
type WaitDeadline string

const (
	// WaitCompensate (the default before the pivot): the saga compensates
	// what took effect, as after a business failure.
	WaitCompensate WaitDeadline = "compensate"
	// WaitFail: the saga becomes failed, for an operator.
	WaitFail WaitDeadline = "fail"
)

// Defaults for step and saga options.
const (
	StepTimeoutDefault      = 10 * time.Second
	RetryInitialDefault     = 200 * time.Millisecond
	RetryMaxIntervalDefault = 30 * time.Second
	RetryMultiplierDefault  = 2.0
	RetryMaxAttemptsDefault = 5  // before the pivot: retry answers before giving up
	PivotMaxAttemptsDefault = 10 // pivot: retry answers before failed
	FlagAfterDefault        = 10 // after the pivot and for compensations: attempts before flagging
	QueryAttemptsDefault    = 5  // query sends before a given-up step is given up for good
	// AcceptedDeadlineDefault is how long a step answered accepted waits
	// for its final answer before it is queried (Step.AcceptedDeadline).
	AcceptedDeadlineDefault   = 24 * time.Hour
	DefinitionVersionDefault  = 1
	maxNameLen                = 100
	retryJitterFraction       = 0.5
	definitionNamePattern     = `^[a-z0-9][a-z0-9._-]*$`
	participantNamePattern    = `^[a-z0-9][a-z0-9._-]*$`
	errNamePatternDescription = "lower-case letters, digits, '.', '_' and '-', starting with a letter or digit"
)

// Default step deadlines: how long a forward step before or at the pivot
// keeps re-sending without a definite answer (timed out sends are outcome
// unknown, not failures) before it is given up.
//
// They are floors, not multiples of the timeout, because a short timeout
// must not make a short deadline: what keeps a participant from answering
// for a while is the transport, not the step. A consumer-group rebalance
// holds a participant's commands for its session timeout (6 s) plus the
// rebalance timeout (5 s) plus a join backoff (3 s), about 15 s; a stalled
// reader is recreated only after about 30 s; a killed participant process
// adds its restart. Two such stalls back to back stay well under 2 minutes,
// so a rebalance cancels nothing whatever the step timeout (the chaos
// harness overrides timeouts to 0.5-3 s). 2 minutes is also the place-order
// saga's own deadline before the pivot, which bounds that phase as a whole.
// Giving up at the pivot is dearer (the saga becomes failed and needs an
// operator, where a step before it compensates on its own), so the pivot
// waits longer by default: a participant outage of several minutes still
// heals without an operator. A step whose single wait is long gets at least
// StepDeadlineTimeouts of them (10 x 30 s = 5 minutes), so it is re-sent
// a few times even with the growing waits.
const (
	StepDeadlineDefault  = 2 * time.Minute
	PivotDeadlineDefault = 10 * time.Minute
	StepDeadlineTimeouts = 10
)

var (
	nameRE        = regexp.MustCompile(definitionNamePattern)
	participantRE = regexp.MustCompile(participantNamePattern)
)

// RetryPolicy says how a step's command is re-sent after a `retry` reply or
// a timeout. Backoff is InitialInterval * Multiplier^(n-1), capped at
// MaxInterval, with up to half of it taken off at random (deterministically
// per saga, step and attempt). The n-th send is awaited for the step's
// Timeout plus the backoff that preceded it (the first for the Timeout), so
// both the waits and the pauses grow while a participant lags.
type RetryPolicy struct {
	InitialInterval time.Duration `json:"initial_interval"`
	MaxInterval     time.Duration `json:"max_interval"`
	Multiplier      float64       `json:"multiplier"`
	// MaxAttempts: before the pivot, `retry` answers after which the step is
	// given up and the saga compensates (that step included); for the pivot,
	// `retry` answers after which the saga becomes failed. Timeouts do not
	// count there: they are bounded by the step's deadline. After the pivot
	// and for compensations, sends after which the saga is flagged (it keeps
	// retrying).
	MaxAttempts int `json:"max_attempts"`
}

func (p RetryPolicy) withDefaults(kind Kind) RetryPolicy {
	if p.InitialInterval <= 0 {
		p.InitialInterval = RetryInitialDefault
	}
	if p.MaxInterval <= 0 {
		p.MaxInterval = RetryMaxIntervalDefault
	}
	if p.MaxInterval < p.InitialInterval {
		p.MaxInterval = p.InitialInterval
	}
	if p.Multiplier < 1 {
		p.Multiplier = RetryMultiplierDefault
	}
	if p.MaxAttempts <= 0 {
		switch kind {
		case Compensable:
			p.MaxAttempts = RetryMaxAttemptsDefault
		case Pivot:
			p.MaxAttempts = PivotMaxAttemptsDefault
		default:
			p.MaxAttempts = FlagAfterDefault
		}
	}
	return p
}

// Step is one typed step of a saga over data T.
type Step[T any] struct {
	// Name is the step's stable external name (used on the wire).
	Name string
	// Participant owns the step; commands go to "<participant>.commands".
	Participant string
	Kind        Kind
	// Command builds the forward command's payload from the saga data.
	Command func(data T) (any, error)
	// Compensation builds the compensate command's payload. Required for
	// compensable steps, forbidden for the pivot and retryable steps.
	Compensation func(data T) (any, error)
	// OnSuccess merges the step's output (the reply payload, possibly
	// empty) into the data. Nil ignores the output.
	OnSuccess func(data *T, output json.RawMessage) error
	// Timeout bounds the wait for a reply to the first send; later sends
	// are awaited for Timeout plus the backoff before them. A timeout means
	// "outcome unknown": the same action is re-sent (the participant's
	// barrier makes it idempotent).
	Timeout time.Duration
	Retry   RetryPolicy
	// Deadline (steps before and at the pivot): total time from the first
	// send without a definite answer after which the step is given up:
	// before the pivot the saga compensates, that step included; at the
	// pivot it becomes failed. Zero: StepDeadlineDefault (PivotDeadlineDefault
	// for the pivot) or StepDeadlineTimeouts x Timeout, whichever is longer.
	// Steps after the pivot never give up and have no deadline.
	Deadline time.Duration
	// QueryAttempts (steps before and at the pivot): when the step is given
	// up without a definite answer, the orchestrator first asks the
	// participant what its barrier recorded (a query command), up to this
	// many sends, and settles the step by the answer; only if no query is
	// answered does the give-up go ahead. Zero: QueryAttemptsDefault;
	// negative: never query (a participant that does not implement the
	// query action).
	QueryAttempts int
	// AcceptedDeadline: how long after its participant answered the
	// forward accepted (it will complete or fail the step later) the step
	// waits for that final answer, re-sending nothing; when it passes the
	// step is given up like a forward without a definite answer: queried
	// first (a query answered accepted counts as no answer), and after the
	// pivot re-sent. It replaces the step's Deadline once accepted. Zero:
	// AcceptedDeadlineDefault.
	AcceptedDeadline time.Duration

	// Group puts the step in a parallel group: consecutive steps with the
	// same Group run at once (every member's command is sent in one
	// decision, replies are taken in any order, and the saga moves on when
	// every member has succeeded). A group is all Compensable (before the
	// pivot) or all Retryable (after it); the pivot and wait steps are
	// never in a group. Members' outputs are merged (OnSuccess) when the
	// group completes, in the order of the definition, whatever the order
	// of the replies. Empty: the step runs alone. See also [Parallel].
	Group string
	// When, if set, is evaluated over the saga data when the step is
	// reached (a group's members all when the group is reached): false
	// records the step as skipped; it is never sent nor compensated.
	When func(data T) bool

	// Event (wait steps only) is the name of the external event the step
	// waits for (the name pattern of step names). An event sent before the
	// saga reaches the step is kept and taken when it does.
	Event string
	// OnDeadline (wait steps only) says what the wait's Deadline means:
	// WaitCompensate (default before the pivot) or WaitFail. For a wait
	// step Deadline is the time from reaching the step; zero waits without
	// a deadline of its own (the saga's Deadline still bounds the phase
	// before the pivot).
	OnDeadline WaitDeadline
	// OnEvent (wait steps only) merges the event's data into the saga data,
	// or refuses the event by returning an error (a rejected approval):
	// before the pivot the saga then compensates, after it it fails. Nil
	// takes any event and merges nothing.
	OnEvent func(data *T, event json.RawMessage) error
}

// Parallel returns steps as members of the parallel group name (their
// Group set to name), each with its own When and-ed with when (nil: no
// group condition), to be spliced into Definition.Steps:
//
//	Steps: slices.Concat(
//		saga.Parallel("reserve", nil, reserveFlight, reserveHotel, reserveCar),
//		[]saga.Step[Trip]{charge},
//	)
func Parallel[T any](name string, when func(data T) bool, steps ...Step[T]) []Step[T] {
	out := make([]Step[T], len(steps))
	for i, s := range steps {
		s.Group = name
		if when != nil {
			if own := s.When; own != nil {
				s.When = func(data T) bool { return when(data) && own(data) }
			} else {
				s.When = when
			}
		}
		out[i] = s
	}
	return out
}

// Definition is a saga type defined in Go over data T.
type Definition[T any] struct {
	// Name is the saga type's stable external name.
	Name    string
	Version int
	Steps   []Step[T]
	// Deadline bounds the phase before the pivot (the whole saga when there
	// is no pivot): when it passes, the saga compensates. Zero: none.
	Deadline time.Duration
	// CompensationFlagAfter: compensation attempts after which the saga is
	// flagged for an operator (it keeps retrying). Default FlagAfterDefault.
	CompensationFlagAfter int
	// MaxSends bounds the commands one saga sends on its own (forward,
	// compensation and query sends of all its steps): once it has sent
	// this many, the next timer that comes due (a timeout, a re-send, a
	// deadline) fails it, flagged with the bound, instead of sending;
	// replies are still taken until then, and an operator's retry re-opens
	// it with one send. Zero: MaxSendsDefault; negative: no bound.
	MaxSends int
}

// StepDef is a step with its types erased; what the state machine reads.
type StepDef struct {
	Name        string
	Participant string
	Kind        Kind
	Timeout     time.Duration
	Retry       RetryPolicy
	// Deadline as defined or overridden; zero means the default, which
	// follows the Timeout (see GiveUpAfter).
	Deadline time.Duration
	// AcceptedDeadline is how long an accepted forward waits for its
	// final answer (Step.AcceptedDeadline with its default).
	AcceptedDeadline time.Duration
	// CompRetry governs compensation re-sends (MaxAttempts = flag after).
	CompRetry RetryPolicy
	// QueryAttempts is how many query sends settle a given-up step before
	// the give-up goes ahead; 0: none (queries disabled).
	QueryAttempts int
	// Group is the parallel group the step is a member of ("" for none);
	// Unit indexes Def.Units, the step's unit of execution (its group, or
	// itself).
	Group string
	Unit  int
	// Conditional: the step has a When predicate.
	Conditional bool
	// Event and OnDeadline: a wait step's event name and deadline meaning.
	Event      string
	OnDeadline WaitDeadline

	command      func(data json.RawMessage) (json.RawMessage, error)
	compensation func(data json.RawMessage) (json.RawMessage, error)
	onSuccess    func(data, output json.RawMessage) (json.RawMessage, error)
	when         func(data json.RawMessage) (bool, error)
	onEvent      func(data, event json.RawMessage) (json.RawMessage, error)
}

// Unit is a run of steps executed as one: a parallel group, or a single
// step. Steps[Start:End] of the definition.
type Unit struct {
	Group      string
	Start, End int
}

// HasCompensation reports whether the step can be compensated.
func (s *StepDef) HasCompensation() bool { return s.compensation != nil }

// GiveUpAfter is the step's effective deadline: how long after its first
// send a forward step before or at the pivot is given up without a definite
// answer. It is computed when asked, so an override of the Timeout moves a
// defaulted deadline with it. Steps after the pivot do not use it.
func (s *StepDef) GiveUpAfter() time.Duration {
	if s.Deadline > 0 {
		return s.Deadline
	}
	floor := StepDeadlineDefault
	if s.Kind == Pivot {
		floor = PivotDeadlineDefault
	}
	return max(floor, StepDeadlineTimeouts*s.Timeout)
}

// Def is a validated, type-erased saga definition.
type Def struct {
	Name     string
	Version  int
	Steps    []StepDef
	Deadline time.Duration
	// Pivot is the index of the pivot step, or -1 when there is none.
	Pivot int
	// MaxSends is the saga's bound on its own sends (Definition.MaxSends
	// with its default); 0: none.
	MaxSends int
	// Units are the steps in order of execution, a parallel group being
	// one unit.
	Units []Unit

	index map[string]int
}

// Waits reports whether some wait step of the definition waits for the
// event called name.
func (d *Def) Waits(name string) bool {
	for i := range d.Steps {
		if d.Steps[i].Kind == Wait && d.Steps[i].Event == name {
			return true
		}
	}
	return false
}

// StepIndex returns the index of the step called name.
func (d *Def) StepIndex(name string) (int, bool) {
	i, ok := d.index[name]
	return i, ok
}

// afterPivot reports whether step i runs after the pivot.
func (d *Def) afterPivot(i int) bool { return d.Pivot >= 0 && i > d.Pivot }

// beforePivot reports whether step i is compensable territory (before the
// pivot, or any step of a saga without pivot).
func (d *Def) beforePivot(i int) bool { return d.Pivot < 0 || i < d.Pivot }

// DefinitionError names the saga and step a definition problem is about.
type DefinitionError struct {
	Saga, Step string
	// Group is the parallel group the problem is about, if any.
	Group   string
	Problem string
}

func (e *DefinitionError) Error() string {
	if e.Group != "" {
		if e.Step == "" {
			return fmt.Sprintf("saga definition %q, group %q: %s", e.Saga, e.Group, e.Problem)
		}
		return fmt.Sprintf("saga definition %q, group %q, step %q: %s", e.Saga, e.Group, e.Step, e.Problem)
	}
	if e.Step == "" {
		return fmt.Sprintf("saga definition %q: %s", e.Saga, e.Problem)
	}
	return fmt.Sprintf("saga definition %q, step %q: %s", e.Saga, e.Step, e.Problem)
}

// ErrInvalidDefinition is wrapped by every DefinitionError.
var ErrInvalidDefinition = errors.New("invalid saga definition")

func (e *DefinitionError) Unwrap() error { return ErrInvalidDefinition }

// Build validates d and erases its types.
func (d Definition[T]) Build() (*Def, error) {
	bad := func(step, format string, args ...any) error {
		return &DefinitionError{Saga: d.Name, Step: step, Problem: fmt.Sprintf(format, args...)}
	}
	if !nameRE.MatchString(d.Name) || len(d.Name) > maxNameLen {
		return nil, bad("", "name must be %s, at most %d characters", errNamePatternDescription, maxNameLen)
	}
	if len(d.Steps) == 0 {
		return nil, bad("", "has no steps")
	}
	if d.Version == 0 {
		d.Version = DefinitionVersionDefault
	}
	if d.Deadline < 0 {
		return nil, bad("", "deadline %s must not be negative", d.Deadline)
	}
	if d.Version < 0 {
		return nil, bad("", "version %d must be positive", d.Version)
	}
	def := &Def{Name: d.Name, Version: d.Version, Deadline: d.Deadline, Pivot: -1, MaxSends: max(d.MaxSends, 0), index: map[string]int{}}
	if d.MaxSends == 0 {
		def.MaxSends = MaxSendsDefault
	}
	for i, s := range d.Steps {
		if !nameRE.MatchString(s.Name) || len(s.Name) > maxNameLen {
			return nil, bad(s.Name, "step %d: name must be %s, at most %d characters", i, errNamePatternDescription, maxNameLen)
		}
		if _, dup := def.index[s.Name]; dup {
			return nil, bad(s.Name, "duplicate step name")
		}
		def.index[s.Name] = i
		switch s.Kind {
		case Pivot:
			if def.Pivot >= 0 {
				return nil, bad(s.Name, "second pivot (step %q is already the pivot); a saga has at most one", d.Steps[def.Pivot].Name)
			}
			def.Pivot = i
			if s.When != nil {
				return nil, bad(s.Name, "is the pivot and cannot have a When condition: the point of no return is always reached")
			}
		case Compensable, Retryable, Wait:
		default:
			return nil, bad(s.Name, "kind %q must be compensable, pivot, retryable or wait", s.Kind)
		}
		if s.Kind == Wait {
			if err := checkWait(s, bad); err != nil {
				return nil, err
			}
		} else {
			if !participantRE.MatchString(s.Participant) {
				return nil, bad(s.Name, "participant %q must be %s", s.Participant, errNamePatternDescription)
			}
			if s.Command == nil {
				return nil, bad(s.Name, "has no Command (payload builder)")
			}
			if s.Event != "" || s.OnDeadline != "" || s.OnEvent != nil {
				return nil, bad(s.Name, "is %s: Event, OnDeadline and OnEvent are for wait steps only", s.Kind)
			}
		}
		if s.QueryAttempts > 1000 {
			return nil, bad(s.Name, "query attempts %d: at most 1000 (negative disables queries)", s.QueryAttempts)
		}
		if s.Timeout < 0 || s.Deadline < 0 || s.AcceptedDeadline < 0 {
			return nil, bad(s.Name, "timeout, deadline and accepted deadline must not be negative")
		}
	}
	for i, s := range d.Steps {
		if s.Kind == Wait {
			if def.afterPivot(i) && s.OnDeadline == WaitCompensate {
				return nil, bad(s.Name, "waits after the pivot %q: past the point of no return its deadline cannot compensate (OnDeadline must be fail)", d.Steps[def.Pivot].Name)
			}
			continue
		}
		switch {
		case def.beforePivot(i) && s.Kind != Compensable:
			if def.Pivot < 0 {
				return nil, bad(s.Name, "is %s but the saga has no pivot: without a pivot every step must be compensable (or a wait)", s.Kind)
			}
			return nil, bad(s.Name, "is %s but runs before the pivot %q: steps before the pivot must be compensable", s.Kind, d.Steps[def.Pivot].Name)
		case def.beforePivot(i) && s.Compensation == nil:
			return nil, bad(s.Name, "runs before the pivot but has no Compensation")
		case i == def.Pivot && s.Compensation != nil:
			return nil, bad(s.Name, "is the pivot (point of no return) and must not have a Compensation")
		case def.afterPivot(i) && s.Kind != Retryable:
			return nil, bad(s.Name, "is %s but runs after the pivot %q: steps after the pivot must be retryable", s.Kind, d.Steps[def.Pivot].Name)
		case def.afterPivot(i) && s.Compensation != nil:
			return nil, bad(s.Name, "runs after the pivot and must not have a Compensation")
		}
	}
	units, err := buildUnits(d.Name, d.Steps)
	if err != nil {
		return nil, err
	}
	def.Units = units
	flagAfter := d.CompensationFlagAfter
	if flagAfter <= 0 {
		flagAfter = FlagAfterDefault
	}
	for _, s := range d.Steps {
		timeout := s.Timeout
		if timeout == 0 {
			timeout = StepTimeoutDefault
		}
		sd := StepDef{
			Name: s.Name, Participant: s.Participant, Kind: s.Kind,
			Timeout: timeout, Retry: s.Retry.withDefaults(s.Kind), Deadline: s.Deadline,
			AcceptedDeadline: cmp.Or(s.AcceptedDeadline, AcceptedDeadlineDefault),
			CompRetry:        RetryPolicy{InitialInterval: s.Retry.InitialInterval, MaxInterval: s.Retry.MaxInterval, Multiplier: s.Retry.Multiplier, MaxAttempts: flagAfter}.withDefaults(Retryable),
			Group:            s.Group, Conditional: s.When != nil, Event: s.Event, OnDeadline: s.OnDeadline,
		}
		if s.Command != nil {
			sd.command = payloadBuilder(s.Command)
		}
		if s.When != nil {
			sd.when = predicate(s.When)
		}
		if s.Kind == Wait {
			sd.onEvent = merger(s.OnEvent)
			sd.QueryAttempts = 0
			if sd.OnDeadline == "" {
				sd.OnDeadline = WaitCompensate
				if def.afterPivot(len(def.Steps)) {
					sd.OnDeadline = WaitFail
				}
			}
		}
		switch {
		case s.QueryAttempts == 0:
			sd.QueryAttempts = QueryAttemptsDefault
		case s.QueryAttempts > 0:
			sd.QueryAttempts = s.QueryAttempts
		}
		if def.afterPivot(len(def.Steps)) {
			sd.QueryAttempts = 0 // never given up, so never queried
		}
		if s.Compensation != nil {
			sd.compensation = payloadBuilder(s.Compensation)
		}
		sd.onSuccess = merger(s.OnSuccess)
		def.Steps = append(def.Steps, sd)
	}
	for u, un := range def.Units {
		for i := un.Start; i < un.End; i++ {
			def.Steps[i].Unit = u
		}
	}
	return def, nil
}

// checkWait checks the fields of wait step s.
func checkWait[T any](s Step[T], bad func(step, format string, args ...any) error) error {
	switch {
	case !nameRE.MatchString(s.Event) || len(s.Event) > maxNameLen:
		return bad(s.Name, "is a wait: its Event %q must be %s, at most %d characters", s.Event, errNamePatternDescription, maxNameLen)
	case s.Participant != "":
		return bad(s.Name, "is a wait: it sends nothing and must not name a participant (%q)", s.Participant)
	case s.Command != nil || s.Compensation != nil || s.OnSuccess != nil:
		return bad(s.Name, "is a wait: it sends nothing and must not have a Command, Compensation or OnSuccess (OnEvent merges the event)")
	case s.OnDeadline != "" && s.OnDeadline != WaitCompensate && s.OnDeadline != WaitFail:
		return bad(s.Name, "on-deadline %q must be compensate or fail", s.OnDeadline)
	case s.Group != "":
		return bad(s.Name, "is a wait and cannot be in the parallel group %q", s.Group)
	}
	return nil
}

// buildUnits groups steps into units of execution and checks the group
// rules: members consecutive, all compensable (before the pivot) or all
// retryable (after it), never the pivot nor a wait.
func buildUnits[T any](sagaName string, steps []Step[T]) ([]Unit, error) {
	bad := func(group, step, format string, args ...any) error {
		return &DefinitionError{Saga: sagaName, Group: group, Step: step, Problem: fmt.Sprintf(format, args...)}
	}
	var units []Unit
	closed := map[string]bool{}
	for i, s := range steps {
		if n := len(units); n > 0 && units[n-1].Group != "" && units[n-1].Group != s.Group {
			closed[units[n-1].Group] = true
		}
		if s.Group == "" {
			units = append(units, Unit{Start: i, End: i + 1})
			continue
		}
		g := s.Group
		if !nameRE.MatchString(g) || len(g) > maxNameLen {
			return nil, bad(g, s.Name, "group name must be %s, at most %d characters", errNamePatternDescription, maxNameLen)
		}
		switch s.Kind {
		case Pivot:
			return nil, bad(g, s.Name, "is the pivot: the point of no return is never inside a parallel group")
		case Wait:
			return nil, bad(g, s.Name, "is a wait: a wait step is never inside a parallel group")
		}
		if n := len(units); n > 0 && units[n-1].Group == g {
			first := steps[units[n-1].Start]
			if first.Kind != s.Kind {
				return nil, bad(g, s.Name, "is %s but member %q is %s: a group is all compensable (before the pivot) or all retryable (after it)", s.Kind, first.Name, first.Kind)
			}
			units[n-1].End = i + 1
			continue
		}
		if closed[g] {
			return nil, bad(g, s.Name, "members must be consecutive steps; another step comes between them")
		}
		units = append(units, Unit{Group: g, Start: i, End: i + 1})
	}
	return units, nil
}

func predicate[T any](f func(T) bool) func(json.RawMessage) (bool, error) {
	return func(raw json.RawMessage) (bool, error) {
		var data T
		if err := json.Unmarshal(raw, &data); err != nil {
			return false, fmt.Errorf("decode saga data: %w", err)
		}
		return f(data), nil
	}
}

func payloadBuilder[T any](f func(T) (any, error)) func(json.RawMessage) (json.RawMessage, error) {
	return func(raw json.RawMessage) (json.RawMessage, error) {
		var data T
		if err := json.Unmarshal(raw, &data); err != nil {
			return nil, fmt.Errorf("decode saga data: %w", err)
		}
		v, err := f(data)
		if err != nil {
			return nil, err
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("encode payload: %w", err)
		}
		if len(b) == 0 || (b[0] != '{' && string(b) != "null") {
			return nil, fmt.Errorf("payload must encode to a JSON object, got %.40s", b)
		}
		return b, nil
	}
}

func merger[T any](f func(*T, json.RawMessage) error) func(data, output json.RawMessage) (json.RawMessage, error) {
	if f == nil {
		return func(data, _ json.RawMessage) (json.RawMessage, error) { return data, nil }
	}
	return func(raw, output json.RawMessage) (json.RawMessage, error) {
		var data T
		if err := json.Unmarshal(raw, &data); err != nil {
			return nil, fmt.Errorf("decode saga data: %w", err)
		}
		if err := f(&data, output); err != nil {
			return nil, err
		}
		return json.Marshal(data)
	}
}
