package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os/exec"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/segmentio/kafka-go"

	"github.com/sagaflow/sagaflow/internal/faultproxy"
	"github.com/sagaflow/sagaflow/orchestrator"
	"github.com/sagaflow/sagaflow/participants/reference"
)

// injector draws faults from a seeded source. Every random draw happens on
// the run goroutine, so the sequence of decisions is a function of the
// seed (their timing is not: processes and the machine set it).
type injector struct {
	h    *harness
	r    *rand.Rand
	stop chan struct{}
	wg   sync.WaitGroup

	replaying, brokerDown atomic.Bool

	kills, cuts, slows, duplicates, stops, brokerKills atomic.Int64
}

func newInjector(h *harness, seed int64) *injector {
	return &injector{h: h, r: rand.New(rand.NewPCG(uint64(seed), 0xc4a05)), stop: make(chan struct{})}
}

// between draws a duration in [lo, hi).
func (in *injector) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(in.r.Int64N(int64(hi-lo)))
}

// after runs fn after d, or at once when the injection stops.
func (in *injector) after(d time.Duration, fn func()) {
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-in.stop:
		}
		fn()
	}()
}

// FaultKinds are the kinds of fault the injector knows.
var FaultKinds = []string{"kill", "cut-postgres", "cut-broker", "duplicate", "stop", "slow"}

func knownFaults(fs []string) bool {
	for _, f := range fs {
		if f != FaultsNone && !slices.Contains(FaultKinds, f) {
			return false
		}
	}
	return true
}

func (in *injector) enabled(kind string) bool {
	return len(in.h.cfg.Faults) == 0 || slices.Contains(in.h.cfg.Faults, kind)
}

// run injects faults until ctx ends.
func (in *injector) run(ctx context.Context) {
	mean := in.h.cfg.FaultEvery
	for {
		wait := time.Duration(float64(mean) * (0.5 + in.r.Float64()))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		var kind string
		switch x := in.r.Float64(); {
		case x < 0.25:
			kind = "kill"
		case x < 0.45:
			kind = "cut-postgres"
		case x < 0.55:
			kind = "cut-broker"
		case x < 0.80:
			kind = "duplicate"
		case x < 0.93:
			kind = "stop"
		default:
			kind = "slow"
		}
		if !in.enabled(kind) {
			continue
		}
		switch kind {
		case "kill":
			in.kill()
		case "cut-postgres":
			in.cutPostgres()
		case "cut-broker":
			in.cutBroker()
		case "duplicate":
			in.duplicate(ctx)
		case "stop":
			in.stopParticipant()
		case "slow":
			in.slow()
		}
	}
}

// kill SIGKILLs a random child and restarts it after a short pause.
func (in *injector) kill() {
	c := in.h.children[in.r.IntN(len(in.h.children))]
	pause := in.between(200*time.Millisecond, 2*time.Second)
	if !c.kill() {
		return
	}
	in.kills.Add(1)
	in.h.log.Debug("chaos: killed", slog.String("child", c.name), slog.Duration("restart_in", pause))
	c.restartAfter(pause, in.stop)
}

// cutPostgres cuts one child's Postgres connections for a short while.
func (in *injector) cutPostgres() {
	c := in.h.children[in.r.IntN(len(in.h.children))]
	d := in.between(100*time.Millisecond, 1500*time.Millisecond)
	px := in.h.pgProxy[c.name]
	if px.IsCut() {
		return
	}
	px.Cut()
	in.cuts.Add(1)
	in.after(d, px.Restore)
}

// cutBroker cuts every connection to the embedded broker for a short
// while; with real Kafka and KillBroker it stops and starts the broker.
func (in *injector) cutBroker() {
	d := in.between(100*time.Millisecond, time.Second)
	down := in.between(time.Second, 3*time.Second)
	switch {
	case in.h.bproxy != nil:
		if in.h.bproxy.IsCut() {
			return
		}
		in.h.bproxy.Cut()
		in.cuts.Add(1)
		in.after(d, in.h.bproxy.Restore)
	case in.h.cfg.KillBroker:
		if !in.brokerDown.CompareAndSwap(false, true) {
			return
		}
		in.brokerKills.Add(1)
		if err := shell(in.h.cfg.BrokerStopCmd); err != nil {
			in.h.log.Warn("chaos: broker stop command", slog.Any("err", err))
		}
		in.after(down, func() {
			if err := shell(in.h.cfg.BrokerStartCmd); err != nil {
				in.h.log.Warn("chaos: broker start command", slog.Any("err", err))
			}
			in.brokerDown.Store(false)
		})
	}
}

func shell(command string) error {
	out, err := exec.Command("/bin/sh", "-c", command).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", command, err, out)
	}
	return nil
}

// slow adds latency to the broker's or a child's Postgres proxy for a while.
func (in *injector) slow() {
	var px *faultproxy.Proxy
	i := in.r.IntN(len(in.h.children) + 1)
	if i == len(in.h.children) {
		px = in.h.bproxy
	} else {
		px = in.h.pgProxy[in.h.children[i].name]
	}
	lat := in.between(20*time.Millisecond, 200*time.Millisecond)
	d := in.between(time.Second, 3*time.Second)
	if px == nil {
		return
	}
	px.SetLatency(lat)
	in.slows.Add(1)
	in.after(d, func() { px.SetLatency(0) })
}

// stopParticipant SIGSTOPs a participant process for longer than the step
// timeout, so its replies come late (after the orchestrator gave up on them).
func (in *injector) stopParticipant() {
	var ps []*child
	for _, c := range in.h.children {
		if c.participant {
			ps = append(ps, c)
		}
	}
	c := ps[in.r.IntN(len(ps))]
	st := in.h.cfg.StepTimeout
	d := in.between(2*st, 6*st)
	if !c.stop() {
		return
	}
	in.stops.Add(1)
	in.after(d, c.cont)
}

// duplicate re-delivers already consumed records: it reads up to n records
// of a command or reply topic partition from an older offset and produces
// exact copies (key, value, headers) to the same partition.
func (in *injector) duplicate(ctx context.Context) {
	topics := []string{orchestrator.ReplyTopicDefault, orchestrator.ReplyTopicDefault}
	for _, p := range reference.AllNames {
		topics = append(topics, p+".commands")
	}
	topic := topics[in.r.IntN(len(topics))]
	partition := in.r.IntN(PartitionsDefault)
	n := 1 + in.r.IntN(20)
	frac := in.r.Float64()
	if !in.replaying.CompareAndSwap(false, true) {
		return
	}
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		defer in.replaying.Store(false)
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		k, err := replay(rctx, in.h.brokers, topic, partition, n, frac)
		in.duplicates.Add(int64(k))
		if err != nil {
			in.h.log.Debug("chaos: replay", slog.String("topic", topic), slog.Int("partition", partition), slog.Any("err", err))
		}
	}()
}

// replay copies up to n records of topic/partition, starting at frac of
// the way from the first to the last offset, to the partition's end.
func replay(ctx context.Context, brokers []string, topic string, partition, n int, frac float64) (int, error) {
	conn, err := kafka.DialLeader(ctx, "tcp", brokers[0], topic, partition)
	if err != nil {
		return 0, fmt.Errorf("dial leader of %s/%d: %w", topic, partition, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	first, last, err := conn.ReadOffsets()
	if err != nil {
		return 0, fmt.Errorf("offsets of %s/%d: %w", topic, partition, err)
	}
	if last <= first {
		return 0, nil
	}
	start := first + int64(frac*float64(last-first))
	if start+int64(n) > last {
		start = max(first, last-int64(n))
	}
	r := kafka.NewReader(kafka.ReaderConfig{
		Brokers: brokers, Topic: topic, Partition: partition,
		MinBytes: 1, MaxBytes: 1 << 20, MaxWait: 100 * time.Millisecond,
	})
	defer r.Close()
	if err := r.SetOffset(start); err != nil {
		return 0, fmt.Errorf("seek %s/%d to %d: %w", topic, partition, start, err)
	}
	var copies []kafka.Message
	for len(copies) < n {
		m, err := r.ReadMessage(ctx)
		if err != nil {
			break
		}
		if m.Offset >= last {
			break
		}
		copies = append(copies, kafka.Message{Key: m.Key, Value: m.Value, Headers: m.Headers})
	}
	if len(copies) == 0 {
		return 0, nil
	}
	if _, err := conn.WriteMessages(copies...); err != nil {
		return 0, fmt.Errorf("produce %d copies to %s/%d: %w", len(copies), topic, partition, err)
	}
	return len(copies), nil
}

// restoreAll ends the injection: pending restores run now, every proxy is
// up without latency, every child runs and none is stopped.
func (in *injector) restoreAll() {
	close(in.stop)
	in.wg.Wait()
	if in.h.bproxy != nil {
		in.h.bproxy.Restore()
		in.h.bproxy.SetLatency(0)
	}
	for _, px := range in.h.pgProxy {
		px.Restore()
		px.SetLatency(0)
	}
	for _, c := range in.h.children {
		c.cont()
		if err := c.start(); err != nil {
			in.h.log.Error("chaos: restart after the injection", slog.String("child", c.name), slog.Any("err", err))
		}
	}
}
