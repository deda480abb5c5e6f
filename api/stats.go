package api

import (
	"errors"
	"net/http"
	"sort"
	"time"

	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
)

// StatsView answers GET /stats. Ages are in seconds.
type StatsView struct {
	At time.Time `json:"at"`
	// Open: sagas not completed or compensated (running, compensating,
	// failed), by type then state. Exact, unless OpenEstimated: more sagas
	// are in flight than the stats count one by one (10,000 by default),
	// and the running and compensating counts are the last full count,
	// taken at OpenCountedAt (every few seconds).
	Open          map[string]map[saga.State]int64 `json:"open"`
	OpenEstimated bool                            `json:"open_estimated"`
	OpenCountedAt time.Time                       `json:"open_counted_at"`
	// Finished: sagas that reached completed, compensated or failed within
	// the last WindowSeconds, by type then state. Exact, unless
	// FinishedEstimated: more finished in the window than the stats count
	// one by one, and the counts are the newest ones' scaled to the window.
	Finished          map[string]map[saga.State]int64 `json:"finished"`
	FinishedEstimated bool                            `json:"finished_estimated"`
	WindowSeconds     float64                         `json:"window_seconds"`
	// ByState sums Open and Finished over the types: its running and
	// compensating counts are estimates when OpenEstimated is set, its
	// completed, compensated and finished-failed part when
	// FinishedEstimated is.
	ByState map[saga.State]int64 `json:"by_state"`
	// OldestInFlightSeconds: age of the oldest running or compensating saga.
	OldestInFlightSeconds float64 `json:"oldest_in_flight_seconds"`
	Outbox                struct {
		Pending             int64   `json:"pending"`
		OldestUnsentSeconds float64 `json:"oldest_unsent_seconds"`
		Dead                int64   `json:"dead"`
	} `json:"outbox"`
	// Backlog: what waits for someone, in the shape one acts on.
	Backlog BacklogView `json:"backlog"`
}

// BacklogView is the backlog of GET /stats (ages in seconds).
type BacklogView struct {
	// OutboxByTopic: unsent commands and the oldest one's age per topic.
	OutboxByTopic []TopicBacklogView `json:"outbox_by_topic"`
	// DeadByClass: dead outbox rows by class of their last error.
	DeadByClass map[string]int64 `json:"dead_by_class"`
	// OldestCompensating, OldestFlagged: per saga type, the oldest open
	// saga compensating, and flagged for an operator.
	OldestCompensating []OldestSagaView `json:"oldest_compensating"`
	OldestFlagged      []OldestSagaView `json:"oldest_flagged"`
	// SLO: per saga type with a consistency window, the open sagas past it.
	SLO []SLOView `json:"slo"`
}

// SLOView is one type's open sagas past its consistency window.
type SLOView struct {
	Type          string  `json:"type"`
	WindowSeconds float64 `json:"window_seconds"`
	Open          int64   `json:"open"`
	// AtLeast: Open is a lower bound (a count stopped at the stats'
	// exact limit).
	AtLeast bool `json:"at_least"`
}

// TopicBacklogView is one topic's unsent commands.
type TopicBacklogView struct {
	Topic               string  `json:"topic"`
	Pending             int64   `json:"pending"`
	OldestUnsentSeconds float64 `json:"oldest_unsent_seconds"`
}

// OldestSagaView is the oldest saga of a type in some condition.
type OldestSagaView struct {
	orchestrator.OldestSaga
	AgeSeconds float64 `json:"age_seconds"`
}

func backlogView(b orchestrator.Backlog) BacklogView {
	v := BacklogView{OutboxByTopic: []TopicBacklogView{}, DeadByClass: b.DeadByClass,
		OldestCompensating: oldestViews(b.OldestCompensating), OldestFlagged: oldestViews(b.OldestFlagged)}
	if v.DeadByClass == nil {
		v.DeadByClass = map[string]int64{}
	}
	v.SLO = []SLOView{}
	for _, x := range b.SLO {
		v.SLO = append(v.SLO, SLOView{Type: x.Type, WindowSeconds: x.Window.Seconds(), Open: x.Open, AtLeast: x.AtLeast})
	}
	for _, t := range b.Outbox {
		v.OutboxByTopic = append(v.OutboxByTopic, TopicBacklogView{Topic: t.Topic, Pending: t.Pending, OldestUnsentSeconds: t.OldestUnsent.Seconds()})
	}
	return v
}

func oldestViews(in []orchestrator.OldestSaga) []OldestSagaView {
	out := make([]OldestSagaView, 0, len(in))
	for _, o := range in {
		out = append(out, OldestSagaView{OldestSaga: o, AgeSeconds: o.Age.Seconds()})
	}
	return out
}

func statsView(st orchestrator.Stats) StatsView {
	v := StatsView{At: st.At, Open: st.Open, OpenEstimated: st.OpenEstimated, OpenCountedAt: st.OpenCountedAt,
		Finished: st.Finished, FinishedEstimated: st.FinishedEstimated, WindowSeconds: st.Window.Seconds(),
		ByState: map[saga.State]int64{}, OldestInFlightSeconds: st.OldestInFlight.Seconds()}
	for _, m := range []map[string]map[saga.State]int64{st.Open, st.Finished} {
		for _, byState := range m {
			for s, n := range byState {
				v.ByState[s] += n
			}
		}
	}
	if v.Open == nil {
		v.Open = map[string]map[saga.State]int64{}
	}
	if v.Finished == nil {
		v.Finished = map[string]map[saga.State]int64{}
	}
	v.Outbox.Pending, v.Outbox.OldestUnsentSeconds, v.Outbox.Dead = st.Outbox.Pending, st.Outbox.OldestUnsent.Seconds(), st.Outbox.Dead
	v.Backlog = backlogView(st.Backlog)
	return v
}

// statsTypes lists the saga types present in v, sorted.
func statsTypes(v StatsView) []string {
	seen := map[string]bool{}
	for _, m := range []map[string]map[saga.State]int64{v.Open, v.Finished} {
		for t := range m {
			seen[t] = true
		}
	}
	out := make([]string, 0, len(seen))
	for t := range seen {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

func (s *Server) readStats(r *http.Request) (StatsView, int, string, error) {
	sr, ok := s.eng.(StatsReader)
	if !ok {
		return StatsView{}, http.StatusNotImplemented, "", errNoStats
	}
	var window time.Duration
	if q := r.URL.Query().Get("window"); q != "" {
		d, err := time.ParseDuration(q)
		if err != nil || d <= 0 || d > orchestrator.StatsWindowMax {
			return StatsView{}, http.StatusBadRequest, "window", errWindow(q)
		}
		window = d
	}
	st, err := sr.Stats(r.Context(), window)
	if errors.Is(err, orchestrator.ErrInvalidInput) {
		return StatsView{}, http.StatusBadRequest, "window", err
	}
	if err != nil {
		return StatsView{}, http.StatusInternalServerError, "", err
	}
	return statsView(st), http.StatusOK, "", nil
}

func (s *Server) stats(w http.ResponseWriter, r *http.Request) {
	v, status, field, err := s.readStats(r)
	switch {
	case status == http.StatusInternalServerError:
		s.failInternal(w, r, "read stats", err)
		return
	case err != nil:
		fail(w, status, field, "%v", err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

type statsError string

func (e statsError) Error() string { return string(e) }

const errNoStats = statsError("this engine does not report stats")

func errWindow(q string) error {
	return statsError("window " + echo(q) + " must be a positive duration like 15m, at most " + orchestrator.StatsWindowMax.String() + " (the stats count only that much history)")
}

// Bounds of read parameters besides the page sizes (limit, journal_limit:
// see their own constants).
const (
	// DurationParamMax bounds the durations of a saga list's filters
	// (older_than, stuck_after).
	DurationParamMax = 10 * 365 * 24 * time.Hour
	// ReconcileSinceMax bounds the since of POST /reconcile/run: the
	// journal entries and finished sagas a run reads.
	ReconcileSinceMax = 7 * 24 * time.Hour
	// MatchMaxBytes bounds the match filter of the dead-letter list.
	MatchMaxBytes = 200
)
