package chaos

import (
	"fmt"

	"github.com/sagaflow/sagaflow/internal/workload"
)

// Result is what a run injected and found.
type Result struct {
	Seed        int64 `json:"seed"`
	Sagas       int   `json:"sagas"`
	Completed   int   `json:"completed"`
	Compensated int   `json:"compensated"`
	Failed      int   `json:"failed"`
	// ProviderCharges is the fake payment provider's own count of charges
	// (Config.PaymentProvider; 0 without).
	ProviderCharges int `json:"provider_charges,omitempty"`
	// Goodput is Completed over the twin's completed count (TwinCompleted):
	// nil when not measured (no twin, or a twin that completed nothing).
	Goodput *float64 `json:"goodput"`
	// TwinCompleted is the twin's completed count, measured (Twin) or
	// given (Config.TwinCompleted); nil without either.
	TwinCompleted *int `json:"twin_completed"`
	// Twin holds the key figures of the twin run; nil when none ran.
	Twin *TwinResult `json:"twin"`
	// ByType counts the sagas of each type (place-order, book-trip) by
	// end state.
	ByType map[string]*workload.Counts `json:"by_type"`
	// Faults injected.
	Kills        int64 `json:"kills"`
	Crashes      int64 `json:"crashes"` // exits the harness did not cause (restarted too)
	Cuts         int64 `json:"cuts"`
	Slows        int64 `json:"slows"`
	Duplicates   int64 `json:"duplicates"`
	Stops        int64 `json:"stops"`
	BrokerKills  int64 `json:"broker_kills"`
	StartRetries int64 `json:"start_retries"`
	// Seen in the databases.
	LateReplies           int64 `json:"late_replies"`
	Lost                  int   `json:"lost"`
	DoubleEffects         int   `json:"double_effects"`
	Stuck                 int   `json:"stuck"`
	CompensatedAfterPivot int   `json:"compensated_after_pivot"`
	DoubleTransitions     int   `json:"double_transitions"`
	Undrained             int64 `json:"undrained"`
	// Outcomes counts the finished records read from the outcome topic
	// after the run (each message id once), checked against the sagas:
	// every end exactly once.
	Outcomes int `json:"outcomes"`
	// Violations lists every violation found (capped), workload.CheckPlan's
	// included; the twin's come first, prefixed "twin: ".
	Violations     []string `json:"violations"`
	ElapsedSeconds float64  `json:"elapsed_seconds"`
	WorkDir        string   `json:"work_dir"`
}

// TwinResult is the key figures of the fault-free twin run.
type TwinResult struct {
	Database    string `json:"database"`
	Completed   int    `json:"completed"`
	Compensated int    `json:"compensated"`
	Failed      int    `json:"failed"`
	// FaultsInjected sums the twin's kills, cuts, slows, duplicates, stops
	// and broker kills: 0 unless the harness is broken.
	FaultsInjected        int64   `json:"faults_injected"`
	Crashes               int64   `json:"crashes"`
	StartRetries          int64   `json:"start_retries"`
	LateReplies           int64   `json:"late_replies"`
	Lost                  int     `json:"lost"`
	DoubleEffects         int     `json:"double_effects"`
	Stuck                 int     `json:"stuck"`
	CompensatedAfterPivot int     `json:"compensated_after_pivot"`
	DoubleTransitions     int     `json:"double_transitions"`
	Undrained             int64   `json:"undrained"`
	Violations            int     `json:"violations"` // listed in Result.Violations
	ElapsedSeconds        float64 `json:"elapsed_seconds"`
}

// OK reports whether the run, and its twin if one ran, found no violation.
func (r Result) OK() bool {
	return len(r.Violations) == 0 && r.Lost == 0 && r.DoubleEffects == 0 && r.Stuck == 0 &&
		r.CompensatedAfterPivot == 0 && r.DoubleTransitions == 0 && r.Undrained == 0 &&
		(r.Twin == nil || r.Twin.ok())
}

func (t TwinResult) ok() bool {
	return t.Violations == 0 && t.Lost == 0 && t.DoubleEffects == 0 && t.Stuck == 0 &&
		t.CompensatedAfterPivot == 0 && t.DoubleTransitions == 0 && t.Undrained == 0
}

// Goodput is completed (under faults) over twinCompleted (the same
// workload without faults); false when the twin completed nothing.
func Goodput(completed, twinCompleted int) (float64, bool) {
	if twinCompleted < 1 || completed < 0 {
		return 0, false
	}
	return float64(completed) / float64(twinCompleted), true
}

// withTwin sets r's goodput from the twin's Result (twin not nil) or from
// a given count (given > 0), and lists the twin's violations first.
func (r *Result) withTwin(twin *Result, given int) {
	switch {
	case twin != nil:
		r.Twin = &TwinResult{
			Completed: twin.Completed, Compensated: twin.Compensated, Failed: twin.Failed,
			FaultsInjected: twin.Kills + twin.Cuts + twin.Slows + twin.Duplicates + twin.Stops + twin.BrokerKills,
			Crashes:        twin.Crashes, StartRetries: twin.StartRetries, LateReplies: twin.LateReplies,
			Lost: twin.Lost, DoubleEffects: twin.DoubleEffects, Stuck: twin.Stuck,
			CompensatedAfterPivot: twin.CompensatedAfterPivot, DoubleTransitions: twin.DoubleTransitions,
			Undrained: twin.Undrained, Violations: len(twin.Violations), ElapsedSeconds: twin.ElapsedSeconds,
		}
		if len(twin.Violations) > 0 {
			vs := make([]string, 0, len(twin.Violations)+len(r.Violations))
			for _, v := range twin.Violations {
				vs = append(vs, "twin: "+v)
			}
			r.Violations = append(vs, r.Violations...)
		}
		given = twin.Completed
	case given < 1:
		return
	}
	r.TwinCompleted = &given
	if g, ok := Goodput(r.Completed, given); ok {
		r.Goodput = &g
	}
}

// Exit codes of `orchestrator chaos` after a run (ExitCode).
const (
	ExitViolation  = 2
	ExitLowGoodput = 3
)

// ExitCode is 0 for a clean run, ExitViolation when r (or its twin) found
// a violation, else ExitLowGoodput when minGoodput > 0 and goodput is
// below it or was not measured.
func (r Result) ExitCode(minGoodput float64) int {
	switch {
	case !r.OK():
		return ExitViolation
	case minGoodput > 0 && (r.Goodput == nil || *r.Goodput < minGoodput):
		return ExitLowGoodput
	}
	return 0
}

// Line is the one-line summary `orchestrator chaos` prints.
func (r Result) Line() string {
	return fmt.Sprintf("chaos: seed=%d sagas=%d completed=%d compensated=%d failed=%d kills=%d cuts=%d duplicates=%d stops=%d late_replies=%d lost=%d double_effects=%d stuck=%d compensated_after_pivot=%d crashes=%d double_transitions=%d violations=%d elapsed=%.1fs %s",
		r.Seed, r.Sagas, r.Completed, r.Compensated, r.Failed, r.Kills, r.Cuts, r.Duplicates, r.Stops, r.LateReplies,
		r.Lost, r.DoubleEffects, r.Stuck, r.CompensatedAfterPivot, r.Crashes, r.DoubleTransitions, len(r.Violations), r.ElapsedSeconds,
		r.GoodputText())
}

// GoodputText is the goodput part of Line: "goodput=0.970 (291/300
// completed; twin 300 in 47.2s)", "... twin 300, given)", or
// "goodput=n/a (...)" when the twin completed nothing or none was run.
func (r Result) GoodputText() string {
	var twin string
	switch {
	case r.Twin != nil:
		twin = fmt.Sprintf("twin %d in %.1fs", r.Twin.Completed, r.Twin.ElapsedSeconds)
		if n := r.Twin.Violations; n > 0 {
			twin += fmt.Sprintf(", %d violations", n)
		}
	case r.TwinCompleted != nil:
		twin = fmt.Sprintf("twin %d, given", *r.TwinCompleted)
	default:
		return "goodput=n/a (no twin run)"
	}
	g := "n/a"
	if r.Goodput != nil {
		g = fmt.Sprintf("%.3f", *r.Goodput)
	}
	return fmt.Sprintf("goodput=%s (%d/%d completed; %s)", g, r.Completed, r.Sagas, twin)
}
