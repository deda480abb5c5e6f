package bench

import (
	"errors"
	"slices"
)

// Median is one result whose figures are the medians, field by field, of
// runs of the same workload (each figure its own median, so they need not
// come from one run); counts are summed and AllComplete holds only if it
// held for every run. Processes are left out: their CPU differs per run.
func Median(runs []Result) (Result, error) {
	if len(runs) == 0 {
		return Result{}, errors.New("bench: median of no runs")
	}
	m := runs[0]
	m.Processes = nil
	med := func(f func(Result) float64) float64 {
		xs := make([]float64, len(runs))
		for i, r := range runs {
			xs[i] = f(r)
		}
		slices.Sort(xs)
		n := len(xs)
		if n%2 == 1 {
			return xs[n/2]
		}
		return (xs[n/2-1] + xs[n/2]) / 2
	}
	m.ElapsedSeconds = med(func(r Result) float64 { return r.ElapsedSeconds })
	m.SagasPerSecond = med(func(r Result) float64 { return r.SagasPerSecond })
	m.StepsPerSecond = med(func(r Result) float64 { return r.StepsPerSecond })
	m.LatencyP50Ms = med(func(r Result) float64 { return r.LatencyP50Ms })
	m.LatencyP95Ms = med(func(r Result) float64 { return r.LatencyP95Ms })
	m.LatencyP99Ms = med(func(r Result) float64 { return r.LatencyP99Ms })
	m.LatencyMaxMs = med(func(r Result) float64 { return r.LatencyMaxMs })
	m.XactPerSaga = med(func(r Result) float64 { return r.XactPerSaga })
	m.WALBytesPerSaga = med(func(r Result) float64 { return r.WALBytesPerSaga })
	m.CPUSecPerSaga = med(func(r Result) float64 { return r.CPUSecPerSaga })
	m.CPUSeconds = med(func(r Result) float64 { return r.CPUSeconds })
	m.HostCPUSecPerSaga = med(func(r Result) float64 { return r.HostCPUSecPerSaga })
	m.HostBusy = med(func(r Result) float64 { return r.HostBusy })
	m.HostSteal = med(func(r Result) float64 { return r.HostSteal })
	m.PGRoundTripsPerSaga = med(func(r Result) float64 { return r.PGRoundTripsPerSaga })
	m.PGRoundTrips = medianMap(runs, med, func(r Result) map[string]float64 { return r.PGRoundTrips })
	m.KafkaRequestsPerSaga = med(func(r Result) float64 { return r.KafkaRequestsPerSaga })
	m.StepHops = medianHops(runs, med)
	m.Consumers = medianConsumers(runs, med)
	m.Sagas, m.Completed, m.NotComplete, m.AllComplete = 0, 0, 0, true
	for _, r := range runs {
		m.Sagas += r.Sagas
		m.Completed += r.Completed
		m.NotComplete += r.NotComplete
		m.AllComplete = m.AllComplete && r.AllComplete
	}
	return m, nil
}

// medianMap is the median, key by key, of a map-valued figure (a key
// missing from a run counts as 0 there); nil when no run has one.
func medianMap(runs []Result, med func(func(Result) float64) float64, f func(Result) map[string]float64) map[string]float64 {
	var out map[string]float64
	for _, r := range runs {
		for k := range f(r) {
			if out == nil {
				out = map[string]float64{}
			}
			if _, done := out[k]; !done {
				out[k] = med(func(r Result) float64 { return f(r)[k] })
			}
		}
	}
	return out
}
