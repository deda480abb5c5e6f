package cli

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cast"
	"github.com/spf13/viper"

	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/saga"
)

// SagaTypeConfig is sagas.<type>.* besides the per-step overrides: the
// actions that need four eyes and the type's consistency window.
type SagaTypeConfig struct {
	Type string
	// FourEyes is sagas.<type>.four_eyes: operator actions a second person
	// must approve (a list, or comma-separated).
	FourEyes []saga.OperatorAction
	// SLO is sagas.<type>.slo: how long a saga of the type may take before
	// it counts against the type's consistency window; 0: unset.
	SLO time.Duration
}

// SagaTypeKeysDoc documents the per-type keys.
const SagaTypeKeysDoc = "sagas.<type>.four_eyes: operator actions (retry, compensate, resolve, mark-done, mark-compensated, force-fail, resume) that a second person must approve; sagas.<type>.slo: the type's consistency window (e.g. `sagas.place-order.slo: 2m`)."

// decodeSagaTypes reads sagas.<type>.four_eyes and .slo, sorted by type;
// types with neither are left out.
func decodeSagaTypes(v *viper.Viper) ([]SagaTypeConfig, error) {
	var out []SagaTypeConfig
	var errs []error
	for _, t := range sortedKeys(v.GetStringMap("sagas")) {
		c := SagaTypeConfig{Type: t}
		base := "sagas." + t + "."
		if v.IsSet(base + "four_eyes") {
			raw := v.Get(base + "four_eyes")
			var items []string
			if list, ok := raw.([]any); ok {
				items = cast.ToStringSlice(list)
			} else {
				items = strings.Split(cast.ToString(raw), ",")
			}
			for _, it := range items {
				if it = strings.TrimSpace(it); it != "" {
					c.FourEyes = append(c.FourEyes, saga.OperatorAction(it))
				}
			}
			if err := (orchestrator.FourEyes{t: c.FourEyes}).Validate(); err != nil {
				errs = append(errs, fmt.Errorf("config: %sfour_eyes: %w", base, err))
			}
		}
		if v.IsSet(base + "slo") {
			raw := v.Get(base + "slo")
			d, err := time.ParseDuration(cast.ToString(raw))
			if err != nil || d <= 0 {
				errs = append(errs, fmt.Errorf("config: %sslo: want a positive duration such as 2m, got %q", base, fmt.Sprint(raw)))
			}
			c.SLO = d
		}
		if len(c.FourEyes) > 0 || c.SLO > 0 {
			out = append(out, c)
		}
	}
	return out, errors.Join(errs...)
}

// fourEyes is the engine's four-eyes configuration of c.
func (c *Config) fourEyes() orchestrator.FourEyes {
	f := orchestrator.FourEyes{}
	for _, t := range c.SagaTypes {
		if len(t.FourEyes) > 0 {
			f[t.Type] = t.FourEyes
		}
	}
	return f
}

// slo is the engine's per-type consistency windows of c.
func (c *Config) slo() orchestrator.SLO {
	s := orchestrator.SLO{}
	for _, t := range c.SagaTypes {
		if t.SLO > 0 {
			s[t.Type] = t.SLO
		}
	}
	return s
}

// checkSagaTypes names the first per-type setting for a type reg does not
// know.
func (c *Config) checkSagaTypes(reg *saga.Registry) error {
	for _, t := range c.SagaTypes {
		if _, ok := reg.Latest(t.Type); !ok {
			return fmt.Errorf("config sagas.%s: unknown saga type %q", t.Type, t.Type)
		}
	}
	return nil
}
