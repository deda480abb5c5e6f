package bench

// Result is what one run measured.
type Result struct {
	Saga        string `json:"saga"`
	Steps       int    `json:"steps"`
	Mode        string `json:"mode"` // "closed" or "open"
	Concurrency int    `json:"concurrency,omitempty"`
	Partitions  int    `json:"partitions"`
	Lanes       int    `json:"lanes"`
	// BatchForward: the generic participants ran batch forward handlers.
	BatchForward bool `json:"batch_forward,omitempty"`
	// Unsigned: the run's commands and replies were not signed.
	Unsigned    bool    `json:"unsigned,omitempty"`
	Rate        float64 `json:"rate,omitempty"`
	Warmup      int     `json:"warmup"`
	Sagas       int     `json:"sagas"`
	Completed   int     `json:"completed"`
	NotComplete int     `json:"not_completed"`
	AllComplete bool    `json:"all_completed"`

	ElapsedSeconds float64 `json:"elapsed_seconds"`
	SagasPerSecond float64 `json:"sagas_per_second"`
	StepsPerSecond float64 `json:"steps_per_second"`

	LatencyP50Ms float64 `json:"latency_p50_ms"`
	LatencyP95Ms float64 `json:"latency_p95_ms"`
	LatencyP99Ms float64 `json:"latency_p99_ms"`
	LatencyMaxMs float64 `json:"latency_max_ms"`

	// StepHops: where each step's time went (see StepHop).
	StepHops []StepHop `json:"step_hops,omitempty"`
	// Consumers: each inbox consumer's waits, batches and busy share
	// (see ConsumerStat).
	Consumers []ConsumerStat `json:"consumers,omitempty"`

	XactPerSaga float64 `json:"pg_transactions_per_saga"`
	// PGRoundTripsPerSaga is the round trips to Postgres per saga of the
	// bench process (every Write on its connections: a statement, a whole
	// batch or pipeline, a commit), and PGRoundTrips the same by group:
	// "orchestrator" (its pool: starts, reply batches, timers; the
	// completion tracker's polls left out), "participants" (their pool) and
	// "relays" (every outbox's lock connection). Not counted with Split.
	PGRoundTripsPerSaga float64            `json:"pg_round_trips_per_saga,omitempty"`
	PGRoundTrips        map[string]float64 `json:"pg_round_trips,omitempty"`
	// KafkaRequestsPerSaga is the requests the embedded broker answered per
	// saga, from every client (fetches, produces, offset commits,
	// heartbeats, metadata). Not counted with Config.Brokers.
	KafkaRequestsPerSaga float64 `json:"kafka_requests_per_saga,omitempty"`
	WALBytesPerSaga      float64 `json:"wal_bytes_per_saga"`
	// CPUSeconds is the CPU time of the measured phase summed over
	// Processes; CPUSecPerSaga divides it by Sagas.
	CPUSecPerSaga float64 `json:"cpu_seconds_per_saga"`
	CPUSeconds    float64 `json:"cpu_seconds"`
	// HostCPUSecPerSaga is the CPU time of the whole machine during the
	// measured phase (every process, Postgres included, and the kernel's
	// work for them; /proc/stat, Linux only) per saga. HostBusy is the
	// share of the machine's CPU time that was busy, HostSteal the share
	// the hypervisor gave to other guests.
	HostCPUSecPerSaga float64 `json:"host_cpu_seconds_per_saga,omitempty"`
	HostBusy          float64 `json:"host_busy,omitempty"`
	HostSteal         float64 `json:"host_steal,omitempty"`
	// Split: the orchestrator and the participants ran in worker processes.
	Split bool `json:"split"`
	// Replicas is the number of worker processes of each role (Split).
	Replicas int `json:"replicas,omitempty"`
	// Processes are the processes whose CPU time is counted: "bench" alone
	// in one process; "driver", "orchestrator" and "participants" split.
	Processes []ProcessCPU `json:"cpu_processes"`

	SynchronousCommit string `json:"synchronous_commit"`
	Fsync             string `json:"fsync"`
	Brokers           string `json:"brokers"`
	Database          string `json:"database"`
}

// ProcessCPU is the CPU time (user + system) of one process of a run.
type ProcessCPU struct {
	// Role is "bench" (everything in one process: driver, embedded broker,
	// orchestrator, participants), or with Split "driver" (saga starts,
	// completion tracker, embedded broker), "orchestrator" or "participants"
	// ("orchestrator-2" and so on with Config.Replicas).
	Role       string  `json:"role"`
	PID        int     `json:"pid"`
	CPUSeconds float64 `json:"cpu_seconds"`
	// CPULimit is the worker's CPU limit (Config.CPULimit), and
	// ThrottledSeconds how long the kernel held it back for its quota over
	// the measured phase: a worker throttled for much of it was bound by
	// its CPU.
	CPULimit         float64 `json:"cpu_limit,omitempty"`
	ThrottledSeconds float64 `json:"throttled_seconds,omitempty"`
}

// cpuDelta is after - before, process by process.
func cpuDelta(before, after []ProcessCPU) []ProcessCPU {
	out := make([]ProcessCPU, len(after))
	for i, a := range after {
		out[i] = a
		for _, b := range before {
			if b.Role == a.Role && b.PID == a.PID {
				out[i].CPUSeconds = a.CPUSeconds - b.CPUSeconds
				out[i].ThrottledSeconds = a.ThrottledSeconds - b.ThrottledSeconds
			}
		}
	}
	return out
}
