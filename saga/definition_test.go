package saga_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
)

// item is the data of the small test sagas.
type item struct {
	ID   string `json:"id"`
	Note string `json:"note,omitempty"`
}

func itemCmd(it item) (any, error) { return map[string]string{"id": it.ID}, nil }

func compStep(name string) saga.Step[item] {
	return saga.Step[item]{Name: name, Participant: "svc-" + name, Kind: saga.Compensable, Command: itemCmd, Compensation: itemCmd}
}

func pivotStep(name string) saga.Step[item] {
	return saga.Step[item]{Name: name, Participant: "svc-" + name, Kind: saga.Pivot, Command: itemCmd}
}

func retryStep(name string) saga.Step[item] {
	return saga.Step[item]{Name: name, Participant: "svc-" + name, Kind: saga.Retryable, Command: itemCmd}
}

func TestDefinitionBuildRejects(t *testing.T) {
	t.Parallel()
	noComp := compStep("b")
	noComp.Compensation = nil
	retryWithComp := retryStep("r1")
	retryWithComp.Compensation = itemCmd
	pivotWithComp := pivotStep("p")
	pivotWithComp.Compensation = itemCmd
	noCommand := compStep("b")
	noCommand.Command = nil
	badParticipant := compStep("b")
	badParticipant.Participant = "Bad Service"
	badKind := compStep("b")
	badKind.Kind = "sometimes"
	negTimeout := compStep("b")
	negTimeout.Timeout = -time.Second

	tests := []struct {
		name     string
		def      saga.Definition[item]
		wantStep string // "" when the problem is the saga itself
		wantText string
	}{
		{"two pivots", saga.Definition[item]{Name: "s", Steps: []saga.Step[item]{compStep("a"), pivotStep("p"), pivotStep("q")}}, "q", "second pivot"},
		{"step before pivot without compensation", saga.Definition[item]{Name: "s", Steps: []saga.Step[item]{compStep("a"), noComp, pivotStep("p")}}, "b", "no Compensation"},
		{"compensation after the pivot", saga.Definition[item]{Name: "s", Steps: []saga.Step[item]{compStep("a"), pivotStep("p"), retryWithComp}}, "r1", "must not have a Compensation"},
		{"compensable step after the pivot", saga.Definition[item]{Name: "s", Steps: []saga.Step[item]{pivotStep("p"), compStep("c")}}, "c", "after the pivot"},
		{"compensation on the pivot", saga.Definition[item]{Name: "s", Steps: []saga.Step[item]{compStep("a"), pivotWithComp}}, "p", "must not have a Compensation"},
		{"retryable before the pivot", saga.Definition[item]{Name: "s", Steps: []saga.Step[item]{compStep("a"), retryStep("r0"), pivotStep("p")}}, "r0", "before the pivot"},
		{"retryable without pivot", saga.Definition[item]{Name: "s", Steps: []saga.Step[item]{compStep("a"), retryStep("r0")}}, "r0", "no pivot"},
		{"duplicate step names", saga.Definition[item]{Name: "s", Steps: []saga.Step[item]{compStep("a"), compStep("a")}}, "a", "duplicate"},
		{"empty saga", saga.Definition[item]{Name: "s"}, "", "no steps"},
		{"bad saga name", saga.Definition[item]{Name: "Place Order", Steps: []saga.Step[item]{compStep("a")}}, "", "name must be"},
		{"empty saga name", saga.Definition[item]{Name: "", Steps: []saga.Step[item]{compStep("a")}}, "", "name must be"},
		{"too long saga name", saga.Definition[item]{Name: strings.Repeat("s", 101), Steps: []saga.Step[item]{compStep("a")}}, "", "at most 100"},
		{"bad step name", saga.Definition[item]{Name: "s", Steps: []saga.Step[item]{compStep("Reserve_Stock")}}, "Reserve_Stock", "name must be"},
		{"bad participant", saga.Definition[item]{Name: "s", Steps: []saga.Step[item]{compStep("a"), badParticipant}}, "b", "participant"},
		{"missing command", saga.Definition[item]{Name: "s", Steps: []saga.Step[item]{compStep("a"), noCommand}}, "b", "no Command"},
		{"unknown kind", saga.Definition[item]{Name: "s", Steps: []saga.Step[item]{badKind}}, "b", "kind"},
		{"negative timeout", saga.Definition[item]{Name: "s", Steps: []saga.Step[item]{negTimeout}}, "b", "negative"},
		{"negative version", saga.Definition[item]{Name: "s", Version: -1, Steps: []saga.Step[item]{compStep("a")}}, "", "version"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			def, err := tt.def.Build()
			if err == nil {
				t.Fatalf("Build accepted %s: %+v", tt.name, def)
			}
			if !errors.Is(err, saga.ErrInvalidDefinition) {
				t.Fatalf("error %v does not wrap ErrInvalidDefinition", err)
			}
			var de *saga.DefinitionError
			if !errors.As(err, &de) {
				t.Fatalf("error %v is not a *DefinitionError", err)
			}
			if de.Saga != tt.def.Name || de.Step != tt.wantStep {
				t.Fatalf("error names saga %q step %q, want saga %q step %q", de.Saga, de.Step, tt.def.Name, tt.wantStep)
			}
			msg := err.Error()
			if tt.def.Name != "" && !strings.Contains(msg, `"`+tt.def.Name+`"`) {
				t.Fatalf("error text %q does not name the saga %q", msg, tt.def.Name)
			}
			if tt.wantStep != "" && !strings.Contains(msg, `"`+tt.wantStep+`"`) {
				t.Fatalf("error text %q does not name the step %q", msg, tt.wantStep)
			}
			if !strings.Contains(msg, tt.wantText) {
				t.Fatalf("error text %q does not explain the problem (want %q in it)", msg, tt.wantText)
			}
		})
	}
}

func TestDefinitionBuildAcceptsPlaceOrder(t *testing.T) {
	t.Parallel()
	def, err := steps.PlaceOrder()
	if err != nil {
		t.Fatalf("PlaceOrder: %v", err)
	}
	if def.Name != "place-order" || def.Version != 2 || len(def.Steps) != 6 {
		t.Fatalf("place-order built as %q v%d with %d steps", def.Name, def.Version, len(def.Steps))
	}
	if def.Pivot != 2 || def.Steps[def.Pivot].Name != "charge-payment" {
		t.Fatalf("pivot = %d, want 2 (charge-payment)", def.Pivot)
	}
	wantKinds := []saga.Kind{saga.Compensable, saga.Compensable, saga.Pivot, saga.Retryable, saga.Retryable, saga.Retryable}
	for i, s := range def.Steps {
		if s.Kind != wantKinds[i] {
			t.Errorf("step %d (%s) kind %s, want %s", i, s.Name, s.Kind, wantKinds[i])
		}
		if got, want := s.HasCompensation(), i < 2; got != want {
			t.Errorf("step %s HasCompensation = %v, want %v", s.Name, got, want)
		}
		if j, ok := def.StepIndex(s.Name); !ok || j != i {
			t.Errorf("StepIndex(%q) = %d, %v; want %d", s.Name, j, ok, i)
		}
	}
	if _, ok := def.StepIndex("no-such-step"); ok {
		t.Fatalf("StepIndex found a step that does not exist")
	}
	if got := def.Steps[2].Retry.MaxAttempts; got != 20 {
		t.Fatalf("pivot MaxAttempts = %d, want the definition's 20", got)
	}
	if got := def.Steps[3].Retry.MaxAttempts; got != saga.FlagAfterDefault {
		t.Fatalf("retryable MaxAttempts defaulted to %d, want FlagAfterDefault %d", got, saga.FlagAfterDefault)
	}
}

func TestDefinitionBuildDefaults(t *testing.T) {
	t.Parallel()
	def, err := saga.Definition[item]{Name: "all-comp", Steps: []saga.Step[item]{compStep("x"), compStep("y"), compStep("z")}}.Build()
	if err != nil {
		t.Fatalf("all-compensable saga rejected: %v", err)
	}
	if def.Pivot != -1 {
		t.Fatalf("Pivot = %d for a saga without pivot, want -1", def.Pivot)
	}
	if def.Version != saga.DefinitionVersionDefault {
		t.Fatalf("Version = %d, want default %d", def.Version, saga.DefinitionVersionDefault)
	}
	for _, s := range def.Steps {
		if !s.HasCompensation() {
			t.Errorf("step %s lost its compensation", s.Name)
		}
		if s.Timeout != saga.StepTimeoutDefault {
			t.Errorf("step %s timeout %s, want default %s", s.Name, s.Timeout, saga.StepTimeoutDefault)
		}
		want := saga.RetryPolicy{InitialInterval: saga.RetryInitialDefault, MaxInterval: saga.RetryMaxIntervalDefault, Multiplier: saga.RetryMultiplierDefault, MaxAttempts: saga.RetryMaxAttemptsDefault}
		if s.Retry != want {
			t.Errorf("step %s retry %+v, want defaults %+v", s.Name, s.Retry, want)
		}
		if s.CompRetry.MaxAttempts != saga.FlagAfterDefault {
			t.Errorf("step %s compensation flag-after %d, want %d", s.Name, s.CompRetry.MaxAttempts, saga.FlagAfterDefault)
		}
	}
	p, err := saga.Definition[item]{Name: "piv", Steps: []saga.Step[item]{pivotStep("p")}, CompensationFlagAfter: 4}.Build()
	if err != nil {
		t.Fatalf("single-pivot saga rejected: %v", err)
	}
	if p.Steps[0].Retry.MaxAttempts != saga.PivotMaxAttemptsDefault {
		t.Fatalf("pivot MaxAttempts = %d, want default %d", p.Steps[0].Retry.MaxAttempts, saga.PivotMaxAttemptsDefault)
	}
	if p.Steps[0].CompRetry.MaxAttempts != 4 {
		t.Fatalf("CompRetry.MaxAttempts = %d, want CompensationFlagAfter 4", p.Steps[0].CompRetry.MaxAttempts)
	}
}

func buildVersion(t *testing.T, version int) *saga.Def {
	t.Helper()
	def, err := saga.Definition[item]{Name: "reg", Version: version, Steps: []saga.Step[item]{compStep("a"), pivotStep("p"), retryStep("r1")}}.Build()
	if err != nil {
		t.Fatalf("build v%d: %v", version, err)
	}
	return def
}

func TestRegistryRegisterLookup(t *testing.T) {
	t.Parallel()
	r := saga.NewRegistry()
	if _, ok := r.Latest("reg"); ok {
		t.Fatalf("empty registry has a latest version")
	}
	v1, v2 := buildVersion(t, 1), buildVersion(t, 2)
	if err := r.Register(v2); err != nil {
		t.Fatalf("register v2: %v", err)
	}
	if err := r.Register(v1); err != nil {
		t.Fatalf("register v1 after v2: %v", err)
	}
	err := r.Register(buildVersion(t, 1))
	if !errors.Is(err, saga.ErrAlreadyRegistered) {
		t.Fatalf("second register of v1: %v, want ErrAlreadyRegistered", err)
	}
	if !strings.Contains(err.Error(), `"reg"`) || !strings.Contains(err.Error(), "version 1") {
		t.Fatalf("duplicate error %q does not name the type and version", err)
	}
	if err := r.Register(nil); err == nil {
		t.Fatalf("Register(nil) accepted")
	}
	if d, ok := r.Latest("reg"); !ok || d != v2 {
		t.Fatalf("Latest = %v, %v; want v2 (registered first, still newest)", d, ok)
	}
	if d, ok := r.Lookup("reg", 1); !ok || d != v1 {
		t.Fatalf("Lookup v1 = %v, %v", d, ok)
	}
	if _, ok := r.Lookup("reg", 3); ok {
		t.Fatalf("Lookup found unregistered v3")
	}
	if _, ok := r.Lookup("nope", 1); ok {
		t.Fatalf("Lookup found unregistered type")
	}
	if err := steps.Register(r); err != nil {
		t.Fatalf("steps.Register: %v", err)
	}
	if got := strings.Join(r.Types(), ","); got != "book-trip,place-order,reg" {
		t.Fatalf("Types = %s", got)
	}
	want := "cars,coupon,flights,hotels,inventory,payment,points,shipping,svc-a,svc-p,svc-r1"
	if got := strings.Join(r.Participants(), ","); got != want {
		t.Fatalf("Participants = %s, want %s", got, want)
	}
}

func TestRegistryOverride(t *testing.T) {
	t.Parallel()
	r := saga.NewRegistry()
	v1, v2 := buildVersion(t, 1), buildVersion(t, 2)
	for _, d := range []*saga.Def{v1, v2} {
		if err := r.Register(d); err != nil {
			t.Fatalf("register: %v", err)
		}
	}
	err := r.Override("reg", "p", saga.StepOverride{
		Timeout: 42 * time.Second, Deadline: time.Minute,
		Retry: saga.RetryPolicy{InitialInterval: 3 * time.Second, MaxAttempts: 7},
	})
	if err != nil {
		t.Fatalf("override: %v", err)
	}
	if v1.Steps[1].Timeout == 42*time.Second {
		t.Fatal("Override mutated the registered definition in place; it must copy on write")
	}
	for _, old := range []*saga.Def{v1, v2} {
		d, ok := r.Lookup("reg", old.Version)
		if !ok {
			t.Fatalf("v%d not found after override", old.Version)
		}
		s := d.Steps[1]
		if s.Timeout != 42*time.Second || s.Deadline != time.Minute {
			t.Fatalf("v%d: timeout %s deadline %s after override", d.Version, s.Timeout, s.Deadline)
		}
		want := saga.RetryPolicy{InitialInterval: 3 * time.Second, MaxInterval: saga.RetryMaxIntervalDefault, Multiplier: saga.RetryMultiplierDefault, MaxAttempts: 7}
		if s.Retry != want {
			t.Fatalf("v%d: retry %+v, want %+v (zero fields keep their value)", d.Version, s.Retry, want)
		}
		if s.CompRetry.InitialInterval != 3*time.Second {
			t.Fatalf("v%d: compensation retry interval %s not overridden", d.Version, s.CompRetry.InitialInterval)
		}
		if d.Steps[0].Timeout != saga.StepTimeoutDefault {
			t.Fatalf("override of p changed step a's timeout to %s", d.Steps[0].Timeout)
		}
	}
	// Zero override keeps everything.
	if err := r.Override("reg", "p", saga.StepOverride{}); err != nil {
		t.Fatalf("empty override: %v", err)
	}
	if d, _ := r.Lookup("reg", 1); d.Steps[1].Timeout != 42*time.Second || d.Steps[1].Retry.MaxAttempts != 7 {
		t.Fatalf("empty override changed the step: %+v", d.Steps[1])
	}
	if err := r.Override("reg", "zz", saga.StepOverride{Timeout: time.Second}); !errors.Is(err, saga.ErrUnknownStep) || !strings.Contains(err.Error(), `"zz"`) {
		t.Fatalf("override of unknown step: %v, want ErrUnknownStep naming it", err)
	}
	if err := r.Override("nope", "p", saga.StepOverride{Timeout: time.Second}); !errors.Is(err, saga.ErrUnknownType) || !strings.Contains(err.Error(), `"nope"`) {
		t.Fatalf("override of unknown type: %v, want ErrUnknownType naming it", err)
	}
}

// A step's deadline defaults to a floor (longer for the pivot) or to
// StepDeadlineTimeouts timeouts, whichever is longer, and a defaulted
// deadline follows an overridden timeout: a short timeout never makes a
// deadline that a consumer-group stall of half a minute exceeds.
func TestStepDeadlineDefaults(t *testing.T) {
	t.Parallel()
	a, b, p := compStep("a"), compStep("b"), pivotStep("p")
	b.Timeout, p.Timeout = 30*time.Second, 2*time.Minute
	c := compStep("c")
	c.Deadline = 45 * time.Second
	def, err := saga.Definition[item]{Name: "dl", Steps: []saga.Step[item]{a, b, c, p}}.Build()
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []time.Duration{saga.StepDeadlineDefault, 5 * time.Minute, 45 * time.Second, 20 * time.Minute} {
		if got := def.Steps[i].GiveUpAfter(); got != want {
			t.Errorf("step %s (timeout %s, deadline %s): GiveUpAfter %s, want %s", def.Steps[i].Name, def.Steps[i].Timeout, def.Steps[i].Deadline, got, want)
		}
	}
	if saga.StepDeadlineDefault < time.Minute || saga.PivotDeadlineDefault < saga.StepDeadlineDefault {
		t.Fatalf("defaults %s / %s: want at least a minute, the pivot's no shorter", saga.StepDeadlineDefault, saga.PivotDeadlineDefault)
	}
	r := saga.NewRegistry()
	if err := r.Register(def); err != nil {
		t.Fatal(err)
	}
	for _, o := range []struct {
		step string
		o    saga.StepOverride
		want time.Duration
	}{
		{"b", saga.StepOverride{Timeout: 500 * time.Millisecond}, saga.StepDeadlineDefault}, // as the chaos harness does
		{"p", saga.StepOverride{Timeout: time.Second}, saga.PivotDeadlineDefault},
		{"c", saga.StepOverride{Timeout: time.Minute}, 45 * time.Second}, // explicit: kept
		{"a", saga.StepOverride{Deadline: 3 * time.Minute}, 3 * time.Minute},
	} {
		if err := r.Override("dl", o.step, o.o); err != nil {
			t.Fatal(err)
		}
		d, _ := r.Latest("dl")
		i, _ := d.StepIndex(o.step)
		if got := d.Steps[i].GiveUpAfter(); got != o.want {
			t.Errorf("after override %+v of %s: GiveUpAfter %s, want %s", o.o, o.step, got, o.want)
		}
	}
}
