package participants

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/relay"
)

// Run consumes the command topic with an inbox consumer (HandleCommands in
// each inbox transaction; invalid records go to "<topic>.dlq") and publishes
// replies from the participant's outbox with a relay, until ctx is
// cancelled. It then lets both finish their in-flight work and returns nil.
// If either stops with an error, Run cancels the other, waits for it and
// returns the error. Apply Migrations before calling Run.
func (p *Participant) Run(ctx context.Context) error {
	if len(p.cfg.Brokers) == 0 {
		return fmt.Errorf("participant %q: Run: Config.Brokers is empty", p.cfg.Name)
	}
	log := p.cfg.Logger.With(slog.String("participant", p.cfg.Name))
	cons, err := inbox.New(p.pool, p.HandleCommands, &inbox.Config{
		Brokers:   p.cfg.Brokers,
		Dialer:    p.cfg.Dialer,
		GroupID:   p.cfg.GroupID,
		Topics:    []string{p.cfg.CommandTopic},
		Schema:    p.cfg.Schema,
		Name:      p.cfg.Name,
		BatchSize: p.cfg.InboxBatchSize,
		Lanes:     p.cfg.InboxLanes,
		Logger:    log.With(slog.String("component", "inbox")),
		Metrics:   p.cfg.InboxMetrics,
	})
	if err != nil {
		return fmt.Errorf("participant %q: Run: command consumer: %w", p.cfg.Name, err)
	}
	rc := &relay.Config{
		Brokers:  p.cfg.Brokers,
		Dialer:   p.cfg.Dialer,
		Logger:   log.With(slog.String("component", "relay")),
		Metrics:  p.cfg.RelayMetrics,
		KeepSent: p.cfg.KeepSent,
		Advanced: relay.Advanced{NoDispatch: p.cfg.NoDispatch},
	}
	rel, err := relay.New(p.pool, p.outbox, rc)
	if err != nil {
		return fmt.Errorf("participant %q: Run: reply relay: %w", p.cfg.Name, err)
	}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	type stopped struct {
		what string
		err  error
	}
	n := 2
	done := make(chan stopped, 2)
	if !p.cfg.NoDispatch {
		p.dispatch.Store(rel)
		defer p.dispatch.Store(nil)
	}
	go func() { done <- stopped{"command consumer", cons.Run(runCtx)} }()
	go func() { done <- stopped{"reply relay", rel.Run(runCtx)} }()
	log.InfoContext(ctx, "participant running", slog.String("topic", p.cfg.CommandTopic), slog.String("group", p.cfg.GroupID))

	var errs []error
	for range n {
		s := <-done
		cancel() // one stopped: stop the other
		switch {
		case s.err != nil:
			errs = append(errs, fmt.Errorf("participant %q: %s: %w", p.cfg.Name, s.what, s.err))
		case ctx.Err() == nil && len(errs) == 0:
			errs = append(errs, fmt.Errorf("participant %q: %s stopped before its context was cancelled", p.cfg.Name, s.what))
		}
	}
	if err := errors.Join(errs...); err != nil {
		log.ErrorContext(ctx, "participant stopped", slog.String("error", err.Error()))
		return err
	}
	log.InfoContext(ctx, "participant stopped")
	return nil
}
