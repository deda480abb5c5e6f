package holds

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"sort"
	"strconv"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/participants"
)

// Listing limits of the HTTP handler.
const (
	// ListLimitDefault is the number of holds GET /holds returns without
	// ?limit=.
	ListLimitDefault = 500
	// ListLimitMax is the largest ?limit= it accepts.
	ListLimitMax = 5000
)

// Owned is one participant's holds table, for Handler.
type Owned struct {
	Participant string
	Table       Table
}

// Listed is one hold as GET /holds answers it: the hold and the
// participant that holds it.
type Listed struct {
	Participant string `json:"participant"`
	Hold
}

// ListResponse is the body of GET /holds.
type ListResponse struct {
	Holds []Listed `json:"holds"`
	// Truncated: more holds match than the limit (narrow the filter).
	Truncated bool `json:"truncated"`
}

// Handler answers GET /holds read-only: the holds of every table in
// owned, oldest first, filtered by ?saga= (a saga id), ?resource= and
// ?state= (held, confirmed or released), at most ?limit= (default
// ListLimitDefault, at most ListLimitMax). A bad filter answers 400
// {"error","field"}; a database error 500 {"error"} (the details go to
// log). Put it behind the same gate as the process's /metrics.
func Handler(db participants.DB, owned []Owned, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.Default()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f, field, err := parseFilter(r)
		if err != nil {
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error(), "field": field})
			return
		}
		limit := f.Limit
		f.Limit = limit + 1 // one more tells whether there are more
		out := ListResponse{Holds: []Listed{}}
		for _, o := range owned {
			hs, err := o.Table.List(r.Context(), db, f)
			if err != nil {
				log.ErrorContext(r.Context(), "list holds", slog.String("participant", o.Participant), slog.String("error", err.Error()))
				writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "internal error: the holds could not be read"})
				return
			}
			for _, h := range hs {
				out.Holds = append(out.Holds, Listed{Participant: o.Participant, Hold: h})
			}
		}
		sort.SliceStable(out.Holds, func(i, j int) bool { return out.Holds[i].Since.Before(out.Holds[j].Since) })
		if len(out.Holds) > limit {
			out.Holds, out.Truncated = out.Holds[:limit], true
		}
		writeJSON(w, http.StatusOK, out)
	})
}

// parseFilter reads the query of GET /holds; on an error it names the
// parameter.
func parseFilter(r *http.Request) (Filter, string, error) {
	q := r.URL.Query()
	f := Filter{Resource: q.Get("resource"), State: q.Get("state"), Limit: ListLimitDefault}
	if s := q.Get("saga"); s != "" {
		id, err := uuid.Parse(s)
		if err != nil {
			return f, "saga", fmt.Errorf("saga %.60q is not a saga id (a UUID)", s)
		}
		f.Saga = id
	}
	switch f.State {
	case "", Held, Confirmed, Released:
	default:
		return f, "state", fmt.Errorf("state %.60q, want %s, %s or %s", f.State, Held, Confirmed, Released)
	}
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > ListLimitMax {
			return f, "limit", fmt.Errorf("limit %.20q, want 1 to %d", s, ListLimitMax)
		}
		f.Limit = n
	}
	return f, "", nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
