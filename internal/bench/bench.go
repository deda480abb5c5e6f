package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
)

// Run runs one benchmark. An error means the run could not be made; sagas
// that did not complete are reported in the Result (AllComplete false).
func Run(ctx context.Context, cfg Config) (Result, error) {
	c := cfg.withDefaults()
	if err := c.validate(); err != nil {
		return Result{}, err
	}
	st, err := setup(ctx, c)
	if err != nil {
		return Result{}, err
	}
	defer st.close()
	return st.measure(ctx)
}

// components runs the orchestrator and the participants while the driver
// measures: in this process, or in worker processes with Config.Split.
type components interface {
	// cpu is the CPU time used so far by each process the run counts.
	cpu() ([]ProcessCPU, error)
	// stop stops them and waits; an error is one that stopping raised (a
	// failure before stop is the run's failure cause instead).
	stop() error
}

// inProcess runs the components as goroutines of this process.
type inProcess struct {
	cancel context.CancelFunc
	errc   chan error
}

func startInProcess(ctx context.Context, st *stack, fail context.CancelCauseFunc) *inProcess {
	runCtx, cancel := context.WithCancel(ctx)
	p := &inProcess{cancel: cancel, errc: make(chan error, 2)}
	for what, run := range map[string]func(context.Context) error{"orchestrator": st.svc.Run, "participants": st.parts.run} {
		go func() { p.errc <- failEarly(runCtx, fail, wrap(what, run(runCtx))) }()
	}
	return p
}

func (p *inProcess) cpu() ([]ProcessCPU, error) {
	return []ProcessCPU{{Role: "bench", PID: os.Getpid(), CPUSeconds: cpuSeconds()}}, nil
}

func (p *inProcess) stop() error {
	p.cancel()
	return errors.Join(<-p.errc, <-p.errc)
}

// failEarly reports err through fail if runCtx is still live (the
// component failed on its own) and returns nil then; after runCtx ended
// it returns err (an error while stopping).
func failEarly(runCtx context.Context, fail context.CancelCauseFunc, err error) error {
	if err != nil && runCtx.Err() == nil {
		fail(err)
		return nil
	}
	return err
}

// measure runs the components, the warm-up and the measured loop and
// computes the Result.
func (st *stack) measure(ctx context.Context) (Result, error) {
	c, log, res := st.c, st.c.Logger, st.res
	eng := st.svc.Engine()
	sagas := pgx.Identifier{eng.Outbox().Schema(), "sagas"}.Sanitize()

	// lctx ends when a component fails (or a worker process exits) before
	// the end: the loops stop at once and the run reports why.
	lctx, fail := context.WithCancelCause(ctx)
	defer fail(nil)
	var comps components
	if c.Split {
		ws, err := startWorkers(lctx, st, fail)
		if err != nil {
			return Result{}, err
		}
		comps = ws
	} else {
		comps = startInProcess(lctx, st, fail)
	}
	trCtx, stopTracker := context.WithCancel(lctx)
	interval := c.PollInterval
	if !c.Split {
		// The engine reports each end at once; polling is the fallback.
		interval = max(interval, inProcessPollInterval)
	}
	tr := newTracker(st.orchPool, sagas, interval)
	if !c.Split {
		st.ends.tr.Store(tr)
	}
	trDone := make(chan error, 1)
	go func() { trDone <- failEarly(trCtx, fail, wrap("tracker", tr.run(trCtx))) }()
	stopAll := sync.OnceValue(func() error {
		stopTracker()
		return errors.Join(<-trDone, comps.stop())
	})
	defer stopAll()
	// failure is why lctx ended early, if it did.
	failure := func() error {
		if lctx.Err() != nil && ctx.Err() == nil {
			return context.Cause(lctx)
		}
		return nil
	}
	abort := func(err error) (Result, error) {
		if cause := failure(); cause != nil {
			err = cause // err is only its consequence (a loop cancelled)
		}
		return Result{}, errors.Join(err, stopAll())
	}

	// Warm-up: not measured.
	next := 0
	if c.Warmup > 0 {
		log.Info("bench: warm-up", slog.Int("sagas", c.Warmup))
		wctx, cancel := context.WithTimeout(lctx, c.Timeout)
		_, _, err := closedLoop(wctx, eng, tr, st.w, 0, c.Warmup, 0, c.Concurrency)
		cancel()
		if err != nil {
			return abort(fmt.Errorf("bench: warm-up: %w", err))
		}
		next = c.Warmup
	}

	// Baselines.
	before, err := readCounters(ctx, st.orchPool, c.Database)
	if err != nil {
		return abort(err)
	}
	pollsBefore := tr.polls.Load()
	tripsBefore, kafkaBefore := st.trips.snapshot(), st.kafkaRequests()
	cpuBefore, err := comps.cpu()
	if err != nil {
		return abort(err)
	}
	hostBefore, hostOK := readHostTicks()
	consBefore, err := snapConsumers(st.reg)
	if err != nil {
		return abort(err)
	}
	consFrom := time.Now()
	if c.CPUProfile != nil {
		if err := pprof.StartCPUProfile(c.CPUProfile); err != nil {
			return abort(fmt.Errorf("bench: start CPU profile: %w", err))
		}
	}

	log.Info("bench: measuring", slog.Int("sagas", c.Sagas), slog.Duration("duration", c.Duration),
		slog.Int("concurrency", c.Concurrency), slog.Float64("rate", c.Rate))
	limit := c.Sagas
	if limit == 0 {
		limit = math.MaxInt32
	}
	mctx, cancel := context.WithTimeout(lctx, c.Timeout+c.Duration)
	var ids []uuid.UUID
	var startedAt time.Time
	if c.Rate > 0 {
		res.Mode, res.Rate = "open", c.Rate
		ids, startedAt, err = openLoop(mctx, eng, tr, st.w, next, limit, c.Duration, c.Rate, c.Concurrency)
	} else {
		res.Mode, res.Concurrency = "closed", c.Concurrency
		ids, startedAt, err = closedLoop(mctx, eng, tr, st.w, next, limit, c.Duration, c.Concurrency)
	}
	cancel()
	if c.CPUProfile != nil {
		pprof.StopCPUProfile()
	}
	cpuAfter, cpuErr := comps.cpu()
	hostAfter, hostAfterOK := readHostTicks()
	tripsAfter, kafkaAfter, pollsAtLoopEnd := st.trips.snapshot(), st.kafkaRequests(), tr.polls.Load()-pollsBefore
	if err != nil {
		return abort(fmt.Errorf("bench: %w", err))
	}
	consAfter, err := snapConsumers(st.reg)
	if err != nil {
		return abort(err)
	}
	res.Consumers = consumerStats(consBefore, consAfter, time.Since(consFrom))
	if cpuErr != nil {
		return abort(cpuErr)
	}

	// Latencies from the engine's own timestamps.
	lat, completed, last, err := latencies(ctx, st.orchPool, sagas, ids)
	if err != nil {
		return abort(err)
	}
	if res.StepHops, err = stepHops(ctx, st.orchPool, eng.Outbox().Schema(), st.parts.schemas, ids); err != nil {
		return abort(err)
	}
	pollsDuring := tr.polls.Load() - pollsBefore
	if err := stopAll(); err != nil {
		return Result{}, err
	}
	if err := failure(); err != nil {
		return Result{}, err
	}
	st.orchPool.Close()
	st.partPool.Close()
	after, err := settledCounters(ctx, c.DatabaseURL, c.Database)
	if err != nil {
		return Result{}, err
	}

	n := len(ids)
	res.Sagas, res.Completed, res.NotComplete = n, completed, n-completed
	res.AllComplete = n > 0 && completed == n
	elapsed := last.Sub(startedAt)
	res.ElapsedSeconds = elapsed.Seconds()
	if elapsed > 0 {
		res.SagasPerSecond = float64(completed) / elapsed.Seconds()
		res.StepsPerSecond = res.SagasPerSecond * float64(res.Steps)
	}
	res.LatencyP50Ms, res.LatencyP95Ms, res.LatencyP99Ms, res.LatencyMaxMs = pct(lat, 0.50), pct(lat, 0.95), pct(lat, 0.99), pct(lat, 1)
	res.Processes = cpuDelta(cpuBefore, cpuAfter)
	for _, p := range res.Processes {
		res.CPUSeconds += p.CPUSeconds
	}
	if n > 0 {
		// The tracker's polls and the counter reads are measurement, not cost.
		x := float64(after.xact-before.xact) - float64(pollsDuring) - 2
		res.XactPerSaga = max(x, 0) / float64(n)
		res.WALBytesPerSaga = float64(after.wal-before.wal) / float64(n)
		res.CPUSecPerSaga = res.CPUSeconds / float64(n)
		if !c.Split {
			res.roundTrips(tripsDelta(tripsBefore, tripsAfter), pollsAtLoopEnd, n)
		}
		if st.broker != nil {
			res.KafkaRequestsPerSaga = float64(kafkaAfter-kafkaBefore) / float64(n)
		}
		if hostOK && hostAfterOK {
			res.hostCPU(hostBefore, hostAfter, n)
		}
	}
	return res, nil
}

func wrap(what string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("bench: %s: %w", what, err)
}
