package chaos

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sagaflow/sagaflow/internal/faultproxy"
	"github.com/sagaflow/sagaflow/internal/workload"
	"github.com/sagaflow/sagaflow/message"
	"github.com/sagaflow/sagaflow/participants/reference"
	"github.com/sagaflow/sagaflow/steps/orderapi"
	"github.com/sagaflow/sagaflow/steps/tripapi"
)

// config is the YAML the children share: short step timeouts so faults
// make them fire, a pivot that keeps re-sending for long, transient
// shipping and points failures. Re-sends back off up to 10-15s: with
// thousands of sagas timing out together (a participant stalled by a
// kill), faster re-sends flood the participants faster than they answer
// and the run never quiesces.
func (h *harness) config() string {
	st := h.cfg.StepTimeout
	return fmt.Sprintf(`log:
  level: warn
database:
  max_conns: %d
kafka:
  partitions: %d
orchestrator:
  timer_interval: 100ms
participants:
  shipping_fail_rate: 0.2
  points_fail_rate: 0.2
  seed: %d
  payment_limit_cents: %d
sagas:
  place-order:
    steps:
      %s:
        timeout: %s
        retry:
          max_attempts: 8
          max_interval: 15s
      %s:
        timeout: %s
        retry:
          max_attempts: 8
          max_interval: 15s
      %s:
        timeout: %s
        deadline: 30m
        retry:
          initial_interval: 100ms
          max_interval: 10s
          max_attempts: 100000
      %s:
        timeout: %s
        retry:
          max_interval: 10s
      %s:
        timeout: %s
        retry:
          max_interval: 10s
      %s:
        timeout: %s
        retry:
          max_interval: 10s
%s`, childMaxConns, PartitionsDefault, h.cfg.Seed, workload.LimitCentsDefault,
		orderapi.StepReserveInventory, st, orderapi.StepLockCoupon, st,
		orderapi.StepChargePayment, 2*st, orderapi.StepCreateShipment, 2*st, orderapi.StepAwardPoints, 2*st,
		orderapi.StepConfirmStock, 2*st, tripConfig(st))
}

// tripConfig is the book-trip part of the children's YAML, on the same
// pattern: reservations like place-order's steps before the pivot, the
// pivot re-sent for long, the confirmations like its steps after it.
func tripConfig(st time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %s:\n    steps:\n", tripapi.SagaType)
	for _, s := range []string{tripapi.StepReserveFlight, tripapi.StepReserveHotel, tripapi.StepReserveCar} {
		fmt.Fprintf(&b, "      %s:\n        timeout: %s\n        retry:\n          max_attempts: 8\n          max_interval: 15s\n", s, st)
	}
	fmt.Fprintf(&b, "      %s:\n        timeout: %s\n        deadline: 30m\n        retry:\n          initial_interval: 100ms\n          max_interval: 10s\n          max_attempts: 100000\n",
		tripapi.StepChargePayment, 2*st)
	for _, s := range []string{tripapi.StepConfirmFlight, tripapi.StepConfirmHotel, tripapi.StepConfirmCar} {
		fmt.Fprintf(&b, "      %s:\n        timeout: %s\n        retry:\n          max_interval: 10s\n", s, 2*st)
	}
	return b.String()
}

// spawn writes the children's config and starts Config.Replicas
// orchestrator replicas and as many participants processes.
func (h *harness) spawn(_ context.Context, workDir, dbURL string) error {
	cfgPath := filepath.Join(workDir, "chaos.yaml")
	if err := os.WriteFile(cfgPath, []byte(h.config()), 0o644); err != nil {
		return fmt.Errorf("chaos: write %s: %w", cfgPath, err)
	}
	u, err := url.Parse(dbURL)
	if err != nil {
		return fmt.Errorf("chaos: database url: %w", err)
	}
	pgTarget := u.Host
	if u.Port() == "" {
		pgTarget = net.JoinHostPort(u.Hostname(), "5432")
	}
	keys, err := signingEnv()
	if err != nil {
		return err
	}
	type spec struct {
		name string
		orch bool
	}
	var specs []spec
	for i := range h.cfg.Replicas {
		specs = append(specs, spec{"orchestrator-" + string(rune('a'+i)), true})
	}
	for i := range h.cfg.Replicas {
		specs = append(specs, spec{fmt.Sprintf("participants-%d", i+1), false})
	}
	for _, s := range specs {
		px, err := faultproxy.New("127.0.0.1:0", pgTarget)
		if err != nil {
			return err
		}
		h.pgProxy[s.name] = px
		cu := *u
		cu.Host = px.Addr()
		args := []string{"--config", cfgPath, "--database-url", cu.String(), "--brokers", strings.Join(h.brokers, ",")}
		if s.orch {
			addr, err := freeAddr()
			if err != nil {
				return err
			}
			h.httpAddr[s.name] = addr
			args = append([]string{"serve"}, append(args, "--addr", addr)...)
		} else {
			args = append([]string{"participants"}, args...)
		}
		env := append(append([]string{ChildEnv + "=1"}, keys...), h.cfg.Env...)
		if h.provider != nil && !s.orch {
			env = append(env, "SAGAFLOW_PARTICIPANTS_PAYMENT_PROVIDER_URL="+h.provider.URL())
		}
		c := &child{
			name: s.name, exe: h.cfg.Executable, args: args, env: env,
			logPath: filepath.Join(workDir, s.name+".log"), log: h.log, participant: !s.orch,
		}
		h.children = append(h.children, c)
		if s.orch {
			h.orchs = append(h.orchs, c)
		}
	}
	for _, c := range h.children {
		if err := c.start(); err != nil {
			return err
		}
	}
	return nil
}

// closeProxies is deferred by Run through the pgProxy map.
func (h *harness) closeProxies() {
	for _, p := range h.pgProxy {
		_ = p.Close()
	}
}

// waitReady waits until every replica answers /readyz with 200.
func (h *harness) waitReady(ctx context.Context, bound time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	for _, c := range h.orchs {
		u := "http://" + h.httpAddr[c.name] + "/readyz"
		for {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
			resp, err := client.Do(req)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					break
				}
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("chaos: %s not ready at %s within %s (see %s): %w", c.name, u, bound, c.logPath, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("chaos: pick a free port: %w", err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr, nil
}

// signingEnv is the children's record signing, as a production install
// runs: fresh keys for the orchestrator (it signs every command, the
// participants verify them) and for each reference participant (it signs
// its replies, the orchestrators take a reply only from its step's
// participant).
func signingEnv() ([]string, error) {
	ok, err := message.GenerateKey("chaos-orchestrator")
	if err != nil {
		return nil, err
	}
	var parts []string
	for _, name := range reference.AllNames {
		k, err := message.GenerateKey("chaos-" + name)
		if err != nil {
			return nil, err
		}
		parts = append(parts, name+":"+k.Format())
	}
	return []string{
		"SAGAFLOW_SECURITY_ORCHESTRATOR_KEYS=" + ok.Format(),
		"SAGAFLOW_SECURITY_PARTICIPANT_KEYS=" + strings.Join(parts, ","),
	}, nil
}
