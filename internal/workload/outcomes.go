package workload

import (
	"context"
	"fmt"
	"sort"

	"github.com/google/uuid"

	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants"
)

// terminal reports whether a saga state is an end.
func terminal(state string) bool {
	return state == "completed" || state == "compensated" || state == "failed"
}

// FinishedOutcomes counts the finished records among outcomes (one saga's
// records, or all of them).
func FinishedOutcomes(outcomes map[uuid.UUID][]message.SagaOutcome) int {
	n := 0
	for _, os := range outcomes {
		for _, o := range os {
			if o.Kind == message.OutcomeFinished {
				n++
			}
		}
	}
	return n
}

// CheckOutcomes checks the outcome topic's records (by saga id, each
// message id once, as a consumer deduplicating by message id reads them)
// against the sagas in schema: every saga that ended has exactly one
// finished record, naming the state it ended in; a saga still running has
// none; no record names a saga that does not exist. It returns the
// violations found, each naming the saga.
func CheckOutcomes(ctx context.Context, db participants.DB, schema string, outcomes map[uuid.UUID][]message.SagaOutcome) ([]string, error) {
	sagas, err := readSagas(ctx, db, schema)
	if err != nil {
		return nil, err
	}
	var bad []string
	for id, s := range sagas {
		var finished []message.SagaOutcome
		for _, o := range outcomes[id] {
			if o.Kind == message.OutcomeFinished {
				finished = append(finished, o)
			}
		}
		switch {
		case terminal(s.state) && len(finished) != 1:
			bad = append(bad, fmt.Sprintf("saga %s (%s) ended %s with %d finished outcome records, want 1", id, s.typ, s.state, len(finished)))
		case terminal(s.state) && finished[0].State != s.state:
			bad = append(bad, fmt.Sprintf("saga %s (%s) ended %s but its outcome record says %s", id, s.typ, s.state, finished[0].State))
		case !terminal(s.state) && len(finished) != 0:
			bad = append(bad, fmt.Sprintf("saga %s (%s) is %s but has %d finished outcome records", id, s.typ, s.state, len(finished)))
		}
		for _, o := range outcomes[id] {
			if o.Type != s.typ || o.AggregateID != s.aggregate {
				bad = append(bad, fmt.Sprintf("saga %s: outcome record of type %q aggregate %q, want %q %q", id, o.Type, o.AggregateID, s.typ, s.aggregate))
				break
			}
		}
	}
	for id := range outcomes {
		if _, ok := sagas[id]; !ok {
			bad = append(bad, fmt.Sprintf("outcome records for saga %s, which does not exist", id))
		}
	}
	sort.Strings(bad)
	return bad, nil
}
