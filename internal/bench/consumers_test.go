package bench

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sagaflow/sagaflow/inbox"
)

func TestConsumerStatsAreTheMeasuredDeltas(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := inbox.NewMetrics(reg, "sagaflow"); err != nil {
		t.Fatal(err)
	}
	before, err := snapConsumers(reg)
	if err != nil {
		t.Fatal(err)
	}
	if len(before) != 0 {
		t.Fatalf("snapshot before any observation: %v, want empty", before)
	}
	b := consumerSnap{"a": {waitN: 10, waitSum: 1, batchN: 2, batchSum: 0.5, sizeSum: 10}, "idle": {waitN: 5, batchN: 1, batchSum: 1, sizeSum: 5}}
	a := consumerSnap{"a": {waitN: 30, waitSum: 3, batchN: 6, batchSum: 2.5, sizeSum: 30}, "idle": {waitN: 5, batchN: 1, batchSum: 1, sizeSum: 5}, "b": {waitN: 4, waitSum: 0.4, batchN: 4, batchSum: 0.2, sizeSum: 4}}
	got := consumerStats(b, a, 2*time.Second)
	want := []ConsumerStat{
		{Consumer: "a", Records: 20, WaitMeanMs: 100, Batches: 4, BatchMeanMs: 500, BatchSizeMean: 5, Busy: 1},
		{Consumer: "b", Records: 4, WaitMeanMs: 100, Batches: 4, BatchMeanMs: 50, BatchSizeMean: 1, Busy: 0.1},
	}
	if len(got) != len(want) {
		t.Fatalf("stats %+v, want %+v (the idle consumer left out)", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		near := func(x, y float64) bool { return x-y < 1e-9 && y-x < 1e-9 }
		if g.Consumer != w.Consumer || g.Records != w.Records || g.Batches != w.Batches || !near(g.WaitMeanMs, w.WaitMeanMs) ||
			!near(g.BatchMeanMs, w.BatchMeanMs) || !near(g.BatchSizeMean, w.BatchSizeMean) || !near(g.Busy, w.Busy) {
			t.Fatalf("stat %d = %+v, want %+v", i, g, w)
		}
	}

	runs := []Result{{Consumers: []ConsumerStat{{Consumer: "a", Busy: 1}}}, {Consumers: []ConsumerStat{{Consumer: "a", Busy: 3}}}, {Consumers: []ConsumerStat{{Consumer: "a", Busy: 2}}}}
	med, err := Median(runs)
	if err != nil || len(med.Consumers) != 1 || med.Consumers[0].Busy != 2 {
		t.Fatalf("median consumers %+v (%v), want a with busy 2", med.Consumers, err)
	}
	runs[2].Consumers[0].Consumer = "other"
	if med, _ := Median(runs); med.Consumers != nil {
		t.Fatalf("median of runs with different consumers = %+v, want none", med.Consumers)
	}
}
