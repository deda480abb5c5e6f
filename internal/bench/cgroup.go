package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// CgroupRoot is the cgroup v1 cpu controller's mount under which a split
// run with Config.CPULimit makes one cgroup per worker process
// (sagaflow-bench-<pid of the driver>/<worker>).
var CgroupRoot = "/sys/fs/cgroup/cpu"

// cfsPeriodMicros is the CFS period the quota of a worker is a share of.
const cfsPeriodMicros = 100_000

// cpuCgroup is the cgroup one worker process runs in.
type cpuCgroup struct {
	dir string
}

// limitCPU makes a cgroup named name that may use cpus CPUs (a CFS quota
// of the period) and moves process pid, with all its threads, into it.
func limitCPU(pid int, name string, cpus float64) (*cpuCgroup, error) {
	parent := filepath.Join(CgroupRoot, "sagaflow-bench-"+strconv.Itoa(os.Getpid()))
	dir := filepath.Join(parent, name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("CPU limit: make cgroup %s (a writable cgroup v1 cpu controller is needed): %w", dir, err)
	}
	cg := &cpuCgroup{dir: dir}
	quota := max(int64(cpus*cfsPeriodMicros), 1000)
	for _, f := range []struct{ file, value string }{
		{"cpu.cfs_period_us", strconv.Itoa(cfsPeriodMicros)},
		{"cpu.cfs_quota_us", strconv.FormatInt(quota, 10)},
		{"cgroup.procs", strconv.Itoa(pid)},
	} {
		if err := os.WriteFile(filepath.Join(dir, f.file), []byte(f.value), 0o644); err != nil {
			return nil, errors.Join(fmt.Errorf("CPU limit: write %s to %s: %w", f.value, filepath.Join(dir, f.file), err), cg.remove())
		}
	}
	return cg, nil
}

// quota reads back the cgroup's CFS quota in CPUs.
func (c *cpuCgroup) quota() (float64, error) {
	b, err := os.ReadFile(filepath.Join(c.dir, "cpu.cfs_quota_us"))
	if err != nil {
		return 0, err
	}
	q, err := strconv.ParseInt(string(trimNewline(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", filepath.Join(c.dir, "cpu.cfs_quota_us"), err)
	}
	return float64(q) / cfsPeriodMicros, nil
}

// throttled is how long, in seconds, the kernel has held the cgroup's
// processes back for its quota (cpu.stat's throttled_time).
func (c *cpuCgroup) throttled() (float64, error) {
	b, err := os.ReadFile(filepath.Join(c.dir, "cpu.stat"))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "throttled_time "); ok {
			ns, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil {
				return 0, fmt.Errorf("%s: throttled_time: %w", filepath.Join(c.dir, "cpu.stat"), err)
			}
			return float64(ns) / 1e9, nil
		}
	}
	return 0, fmt.Errorf("%s: no throttled_time", filepath.Join(c.dir, "cpu.stat"))
}

// remove deletes the cgroup (empty once its process exited) and its
// parent when it is the last one.
func (c *cpuCgroup) remove() error {
	if err := os.Remove(c.dir); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove cgroup %s: %w", c.dir, err)
	}
	// The parent goes with its last worker; other workers still hold it.
	_ = os.Remove(filepath.Dir(c.dir))
	return nil
}

func trimNewline(b []byte) []byte {
	for len(b) > 0 && (b[len(b)-1] == '\n' || b[len(b)-1] == ' ') {
		b = b[:len(b)-1]
	}
	return b
}
