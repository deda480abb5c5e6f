package bench

import (
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ConsumerStat is one inbox consumer's part of the measured phase, from
// its metrics (sagaflow_inbox_record_wait_seconds, _batch_seconds,
// _batch_size): how long its records waited between their producer's write
// and the start of their batch, how long its batches took to commit, and
// how busy that kept it. A consumer whose Busy nears its lanes (or 1 for a
// single partition) is the queue of the run. Empty with --split (the
// consumers run in the worker processes).
type ConsumerStat struct {
	Consumer      string  `json:"consumer"`
	Records       int     `json:"records"`
	WaitMeanMs    float64 `json:"wait_mean_ms"`
	Batches       int     `json:"batches"`
	BatchMeanMs   float64 `json:"batch_mean_ms"`
	BatchSizeMean float64 `json:"batch_size_mean"`
	// Busy is the consumer's batch time over the measured wall time:
	// concurrent lanes add up.
	Busy float64 `json:"busy"`
}

type consumerSums struct{ waitN, waitSum, batchN, batchSum, sizeSum float64 }

// consumerSnap is the inbox histograms' counts and sums per consumer.
type consumerSnap map[string]consumerSums

func snapConsumers(g prometheus.Gatherer) (consumerSnap, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, err
	}
	out := consumerSnap{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var name string
			for _, l := range m.GetLabel() {
				if l.GetName() == "consumer" {
					name = l.GetValue()
				}
			}
			h := m.GetHistogram()
			if name == "" || h == nil {
				continue
			}
			s := out[name]
			switch mf.GetName() {
			case "sagaflow_inbox_record_wait_seconds":
				s.waitN, s.waitSum = float64(h.GetSampleCount()), h.GetSampleSum()
			case "sagaflow_inbox_batch_seconds":
				s.batchN, s.batchSum = float64(h.GetSampleCount()), h.GetSampleSum()
			case "sagaflow_inbox_batch_size":
				s.sizeSum = h.GetSampleSum()
			default:
				continue
			}
			out[name] = s
		}
	}
	return out, nil
}

// consumerStats is what each consumer did between two snapshots taken wall
// apart, by consumer name.
func consumerStats(before, after consumerSnap, wall time.Duration) []ConsumerStat {
	var out []ConsumerStat
	for name, a := range after {
		b := before[name]
		d := consumerSums{a.waitN - b.waitN, a.waitSum - b.waitSum, a.batchN - b.batchN, a.batchSum - b.batchSum, a.sizeSum - b.sizeSum}
		if d.waitN <= 0 && d.batchN <= 0 {
			continue
		}
		s := ConsumerStat{Consumer: name, Records: int(d.waitN), Batches: int(d.batchN)}
		if d.waitN > 0 {
			s.WaitMeanMs = d.waitSum / d.waitN * 1000
		}
		if d.batchN > 0 {
			s.BatchMeanMs = d.batchSum / d.batchN * 1000
			s.BatchSizeMean = d.sizeSum / d.batchN
		}
		if wall > 0 {
			s.Busy = d.batchSum / wall.Seconds()
		}
		out = append(out, s)
	}
	slices.SortFunc(out, func(x, y ConsumerStat) int {
		switch {
		case x.Consumer < y.Consumer:
			return -1
		case x.Consumer > y.Consumer:
			return 1
		}
		return 0
	})
	return out
}

// medianConsumers is the field-by-field median of the runs' consumer
// lines, or nil unless every run has the same consumers.
func medianConsumers(runs []Result, med func(func(Result) float64) float64) []ConsumerStat {
	if !sameRows(runs, func(r Result) []ConsumerStat { return r.Consumers }, func(c ConsumerStat) string { return c.Consumer }) {
		return nil
	}
	first := runs[0].Consumers
	out := make([]ConsumerStat, len(first))
	for i := range first {
		f := func(get func(ConsumerStat) float64) float64 {
			return med(func(r Result) float64 { return get(r.Consumers[i]) })
		}
		out[i] = ConsumerStat{
			Consumer:      first[i].Consumer,
			Records:       int(f(func(c ConsumerStat) float64 { return float64(c.Records) })),
			WaitMeanMs:    f(func(c ConsumerStat) float64 { return c.WaitMeanMs }),
			Batches:       int(f(func(c ConsumerStat) float64 { return float64(c.Batches) })),
			BatchMeanMs:   f(func(c ConsumerStat) float64 { return c.BatchMeanMs }),
			BatchSizeMean: f(func(c ConsumerStat) float64 { return c.BatchSizeMean }),
			Busy:          f(func(c ConsumerStat) float64 { return c.Busy }),
		}
	}
	return out
}

// sameRows reports whether the runs have rows and every run has the rows of
// the first, by key, in the same order (so their medians can be taken row
// by row).
func sameRows[T any](runs []Result, rows func(Result) []T, key func(T) string) bool {
	if len(runs) == 0 || len(rows(runs[0])) == 0 {
		return false
	}
	first := rows(runs[0])
	for _, r := range runs[1:] {
		rs := rows(r)
		if len(rs) != len(first) {
			return false
		}
		for i := range first {
			if key(rs[i]) != key(first[i]) {
				return false
			}
		}
	}
	return true
}
