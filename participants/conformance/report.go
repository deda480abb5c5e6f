package conformance

import (
	"encoding/json"
	"fmt"
	"io"
)

// Check is the result of one check.
type Check struct {
	Name   string `json:"name"`
	Passed bool   `json:"passed"`
	// Why says what was wrong (empty when Passed).
	Why string `json:"why,omitempty"`
}

// Report is the result of a run: a Check per duty, in the order run.
type Report struct {
	Participant string  `json:"participant"`
	Checks      []Check `json:"checks"`
	Passed      int     `json:"passed"`
	Failed      int     `json:"failed"`
}

// OK reports whether the run made checks and all of them passed.
func (r Report) OK() bool { return r.Failed == 0 && r.Passed > 0 }

// Check returns the check named name and whether there is one.
func (r Report) Check(name string) (Check, bool) {
	for _, c := range r.Checks {
		if c.Name == name {
			return c, true
		}
	}
	return Check{}, false
}

func (r *Report) add(c Check) {
	r.Checks = append(r.Checks, c)
	if c.Passed {
		r.Passed++
	} else {
		r.Failed++
	}
}

// WriteText prints a line per check (`PASS name` or `FAIL name: why`) and
// then `N passed, M failed`.
func (r Report) WriteText(w io.Writer) error {
	for _, c := range r.Checks {
		var err error
		if c.Passed {
			_, err = fmt.Fprintf(w, "PASS %s\n", c.Name)
		} else {
			_, err = fmt.Fprintf(w, "FAIL %s: %s\n", c.Name, c.Why)
		}
		if err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "%d passed, %d failed\n", r.Passed, r.Failed)
	return err
}

// WriteJSON prints the report as one JSON object.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}
