package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/sagaflow/sagaflow/saga"
)

func TestSagaTypeSettings(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       []SagaTypeConfig
		err        string
	}{
		{"a list and a window", "sagas:\n  place-order:\n    four_eyes: [mark-done, force-fail]\n    slo: 2m\n",
			[]SagaTypeConfig{{Type: "place-order", FourEyes: []saga.OperatorAction{saga.ActionMarkDone, saga.ActionForceFail}, SLO: 2 * time.Minute}}, ""},
		{"comma-separated", "sagas:\n  place-order:\n    four_eyes: \"resolve, resume\"\n",
			[]SagaTypeConfig{{Type: "place-order", FourEyes: []saga.OperatorAction{saga.ActionResolve, saga.ActionResume}}}, ""},
		{"steps only: no per-type settings", "sagas:\n  place-order:\n    steps:\n      charge-payment:\n        timeout: 3s\n", nil, ""},
		{"an action four eyes cannot take", "sagas:\n  place-order:\n    four_eyes: [check]\n", nil, "sagas.place-order.four_eyes: four eyes for saga type place-order: action \"check\""},
		{"a bad window", "sagas:\n  place-order:\n    slo: soon\n", nil, "sagas.place-order.slo: want a positive duration"},
		{"a negative window", "sagas:\n  place-order:\n    slo: -1m\n", nil, "sagas.place-order.slo"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clearEnv(t)
			v := newViper()
			v.SetConfigType("yaml")
			if err := v.ReadConfig(strings.NewReader(tc.yaml)); err != nil {
				t.Fatal(err)
			}
			c, err := Load(v)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("Load: %v, want an error saying %q", err, tc.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(c.SagaTypes) != len(tc.want) {
				t.Fatalf("saga types %+v, want %+v", c.SagaTypes, tc.want)
			}
			for i, w := range tc.want {
				g := c.SagaTypes[i]
				if g.Type != w.Type || g.SLO != w.SLO || strings.Join(actions(g.FourEyes), ",") != strings.Join(actions(w.FourEyes), ",") {
					t.Errorf("saga type %+v, want %+v", g, w)
				}
			}
			ec := c.engine()
			for _, w := range tc.want {
				for _, a := range w.FourEyes {
					if !ec.FourEyes.Requires(w.Type, a) {
						t.Errorf("the engine's four eyes lack %s of %s", a, w.Type)
					}
				}
			}
		})
	}
}

func TestRegistryRefusesUnknownSagaTypeSettings(t *testing.T) {
	clearEnv(t)
	v := newViper()
	v.Set("sagas.place-ordr.slo", "1m")
	c, err := Load(v)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.registry(); err == nil || !strings.Contains(err.Error(), "config sagas.place-ordr: unknown saga type") {
		t.Fatalf("registry: %v, want the unknown type named", err)
	}
}

func actions(a []saga.OperatorAction) []string {
	out := make([]string, len(a))
	for i, x := range a {
		out[i] = string(x)
	}
	return out
}
