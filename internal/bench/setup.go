package bench

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/sagaflow/sagaflow/internal/dburl"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sagaflow/sagaflow/inbox"
	"github.com/sagaflow/sagaflow/internal/devbroker"
	"github.com/sagaflow/sagaflow/internal/kafkaclient"
	"github.com/sagaflow/sagaflow/internal/metricset"
	"github.com/sagaflow/sagaflow/internal/runall"
	"github.com/sagaflow/sagaflow/internal/workload"
	"github.com/sagaflow/sagaflow/migrations"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants/reference"
	"github.com/sagaflow/sagaflow/relay"
	"github.com/sagaflow/sagaflow/saga"
	"github.com/sagaflow/sagaflow/steps"
)

// stack is a run set up: its fresh database (migrated, topics created,
// place-order stock seeded), the broker, the two pools, the orchestrator
// service and the participants. Nothing runs yet.
type stack struct {
	c       Config
	dbURL   string
	brokers []string
	broker  *devbroker.Broker // nil with Config.Brokers
	// trips counts the round trips of the bench process's connections to
	// Postgres (the pools below and the relays' connections).
	trips    *pgTrips
	orchPool *pgxpool.Pool
	partPool *pgxpool.Pool
	svc      *orchestrator.Service
	parts    *participantSet
	w        work
	res      Result // the run's settings, filled in by measure
	// reg holds the in-process components' metrics (the inbox consumers'
	// feed the per-consumer lines).
	reg *prometheus.Registry
	// ends tells the tracker of sagas the in-process engine finished (nil
	// in a split run: the tracker polls).
	ends *endSink
}

func setup(ctx context.Context, c Config) (_ *stack, err error) {
	dbURL, err := dburl.Fresh(ctx, c.DatabaseURL, c.Database)
	if err != nil {
		return nil, fmt.Errorf("bench: %w", err)
	}
	st := &stack{c: c, dbURL: dbURL, brokers: c.Brokers}
	defer func() {
		if err != nil {
			st.close()
		}
	}()
	if len(st.brokers) == 0 {
		// kfake listens on TCP (127.0.0.1): the worker processes of a split
		// run connect to it like any client.
		if st.broker, err = devbroker.Start(devbroker.Config{Partitions: st.c.Partitions}); err != nil {
			return nil, fmt.Errorf("bench: start embedded broker: %w", err)
		}
		st.brokers = st.broker.Addrs()
	}
	st.trips = newPGTrips()
	if st.orchPool, err = newPool(ctx, dbURL, c.MaxConns, orchestratorApp, st.trips); err != nil {
		return nil, err
	}
	if st.partPool, err = newPool(ctx, dbURL, c.MaxConns, participantsApp, st.trips); err != nil {
		return nil, err
	}
	st.res = Result{Saga: c.Saga, Steps: c.Steps, Warmup: c.Warmup, Brokers: strings.Join(st.brokers, ","), Database: c.Database, Split: c.Split, Replicas: splitReplicas(c), Partitions: c.Partitions, Lanes: c.Lanes, BatchForward: c.BatchForward && c.Saga == SagaGeneric, Unsigned: c.Unsigned}
	if c.Saga == SagaPlaceOrder {
		st.res.Steps = 5
	}
	if err := st.orchPool.QueryRow(ctx, `SELECT current_setting('synchronous_commit'), current_setting('fsync')`).Scan(&st.res.SynchronousCommit, &st.res.Fsync); err != nil {
		return nil, fmt.Errorf("bench: read synchronous_commit: %w", err)
	}

	m, err := metricset.New()
	if err != nil {
		return nil, err
	}
	st.reg = m.Registry
	if st.parts, err = newParticipants(st.partPool, st.brokers, c, m); err != nil {
		return nil, err
	}
	if err := st.parts.prepare(ctx); err != nil {
		return nil, err
	}
	st.ends = &endSink{}
	c.Engine.OnFinished = st.ends.finished
	if st.svc, err = newService(st.orchPool, st.brokers, c, m); err != nil {
		return nil, err
	}
	if err := st.svc.Prepare(ctx); err != nil {
		return nil, fmt.Errorf("bench: prepare orchestrator: %w", err)
	}
	switch c.Saga {
	case SagaGeneric:
		st.w = genericWork{seed: c.Seed}
	case SagaPlaceOrder:
		n := c.Warmup + c.Sagas
		if c.Duration > 0 {
			n = c.Warmup + min(maxPlannedOrders, int(c.Duration.Seconds()*3000)+1000)
			if c.Sagas > 0 {
				n = min(n, c.Warmup+c.Sagas)
			}
		}
		plan := workload.NewPlan(workload.Mix{Orders: n, Seed: c.Seed})
		if err := workload.Seed(ctx, st.partPool, workload.SchemasOf("", st.parts.ref), plan); err != nil {
			return nil, err
		}
		st.w = orderWork{orders: plan.Orders}
	}
	return st, nil
}

func (st *stack) close() {
	if st.orchPool != nil {
		st.orchPool.Close()
	}
	if st.partPool != nil {
		st.partPool.Close()
	}
	if st.broker != nil {
		st.broker.Close()
	}
}

// newService builds the orchestrator service of c.Saga over pool; it does
// not touch Postgres or Kafka.
func newService(pool *pgxpool.Pool, brokers []string, c Config, m *metricset.Set) (*orchestrator.Service, error) {
	reg := saga.NewRegistry()
	switch c.Saga {
	case SagaGeneric:
		def, err := GenericDefinition(c.Steps)
		if err != nil {
			return nil, err
		}
		if err := reg.Register(def); err != nil {
			return nil, err
		}
	case SagaPlaceOrder:
		if err := steps.Register(reg); err != nil {
			return nil, err
		}
	}
	ec := c.Engine
	ec.Metrics = m.Saga
	sg, err := c.signing(reg.Participants())
	if err != nil {
		return nil, err
	}
	ec.Signing = sg
	return orchestrator.New(pool, reg, &orchestrator.Config{
		Brokers: brokers, Engine: ec, Logger: c.Logger.With(slog.String("component", "orchestrator")),
		Partitions: c.Partitions,
		Inbox:      inbox.Config{Metrics: m.Inbox, Lanes: c.Lanes},
		Relay:      relay.Config{Metrics: m.Relay},
	})
}

// participantSet is the participants of c.Saga.
type participantSet struct {
	// prepare migrates their schemas and creates their topics.
	prepare func(context.Context) error
	// run runs them (consumers, handlers, relays) until ctx ends.
	run func(context.Context) error
	ref *reference.Set // place-order: the set whose schemas are seeded
	// schemas are the participants' schemas (their barrier tables).
	schemas []string
}

// newParticipants builds the participants of c.Saga over pool; it does not
// touch Postgres or Kafka.
func newParticipants(pool *pgxpool.Pool, brokers []string, c Config, m *metricset.Set) (*participantSet, error) {
	po := partOptions{CommandKeys: c.commandKeys(), replyKey: c.replyKey, Lanes: c.Lanes, BatchForward: c.BatchForward, Brokers: brokers, Logger: c.Logger.With(slog.String("component", "participants")), InboxMetrics: m.Inbox, RelayMetrics: m.Relay}
	switch c.Saga {
	case SagaGeneric:
		gs, err := newGenericSet(pool, c.Steps, po)
		if err != nil {
			return nil, err
		}
		prepare := func(ctx context.Context) error {
			sets, err := gs.migrations()
			if err != nil {
				return err
			}
			if _, err := migrations.Migrate(ctx, pool, sets...); err != nil {
				return fmt.Errorf("bench: migrate participants: %w", err)
			}
			if err := kafkaclient.EnsureTopics(ctx, brokers, c.Partitions, 1, gs.topics()...); err != nil {
				return fmt.Errorf("bench: create participant topics: %w", err)
			}
			return nil
		}
		var schemas []string
		for i := 1; i <= c.Steps; i++ {
			schemas = append(schemas, genericSchema(i))
		}
		return &participantSet{prepare: prepare, run: func(ctx context.Context) error { return runParticipants(ctx, gs) }, schemas: schemas}, nil
	case SagaPlaceOrder:
		set, err := reference.New(pool, reference.Options{
			Brokers: brokers, Seed: c.Seed, Logger: po.Logger, InboxMetrics: m.Inbox, RelayMetrics: m.Relay,
			Partitions: c.Partitions, CommandKeys: c.commandKeys(), ReplyKeys: replyKeys(c),
		})
		if err != nil {
			return nil, err
		}
		prepare := func(ctx context.Context) error {
			if err := set.Prepare(ctx); err != nil {
				return fmt.Errorf("bench: prepare reference participants: %w", err)
			}
			return nil
		}
		var schemas []string
		for _, p := range set.Participants() {
			schemas = append(schemas, p.Schema())
		}
		return &participantSet{prepare: prepare, run: set.Run, ref: set, schemas: schemas}, nil
	}
	return nil, fmt.Errorf("bench: unknown saga %q", c.Saga)
}

// newPool opens a pool named app; with trips its connections' round trips
// are counted.
func newPool(ctx context.Context, url string, maxConns int, app string, trips *pgTrips) (*pgxpool.Pool, error) {
	pc, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("bench: database url: %w", err)
	}
	pc.MaxConns = int32(maxConns)
	pc.ConnConfig.RuntimeParams["application_name"] = app
	if trips != nil {
		pc.ConnConfig.AfterNetConnect = trips.afterNetConnect(pc.ConnConfig.AfterNetConnect)
	}
	p, err := pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, fmt.Errorf("bench: %s pool: %w", app, err)
	}
	return p, nil
}

// runParticipants runs the generic participants until ctx ends.
func runParticipants(ctx context.Context, gs *genericSet) error {
	fns := make([]func(context.Context) error, len(gs.parts))
	for i, p := range gs.parts {
		fns[i] = p.Run
	}
	return runall.Run(ctx, fns...)
}
