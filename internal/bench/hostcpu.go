package bench

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// hostTicks are the machine-wide CPU times of /proc/stat's "cpu" line, in
// USER_HZ ticks (userHZ).
type hostTicks struct {
	busy  int64 // user, nice, system, irq, softirq: every process on the box, the kernel's work for them
	idle  int64 // idle and iowait
	steal int64 // taken by the hypervisor for other guests
}

// readHostTicks reads /proc/stat; ok is false where there is none.
func readHostTicks() (hostTicks, bool) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return hostTicks{}, false
	}
	t, err := parseHostTicks(b)
	return t, err == nil
}

// parseHostTicks parses the first ("cpu ") line of /proc/stat.
func parseHostTicks(b []byte) (hostTicks, error) {
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) == 0 || string(f[0]) != "cpu" {
			continue
		}
		if len(f) < 9 {
			return hostTicks{}, fmt.Errorf("/proc/stat: cpu line has %d fields, want at least 9", len(f))
		}
		var v [8]int64
		for i := range v {
			n, err := strconv.ParseInt(string(f[i+1]), 10, 64)
			if err != nil {
				return hostTicks{}, fmt.Errorf("/proc/stat: cpu field %d: %w", i+1, err)
			}
			v[i] = n
		}
		// user nice system idle iowait irq softirq steal
		return hostTicks{busy: v[0] + v[1] + v[2] + v[5] + v[6], idle: v[3] + v[4], steal: v[7]}, nil
	}
	return hostTicks{}, fmt.Errorf("/proc/stat: no cpu line")
}

// hostCPU fills the machine-wide figures of r from two readings.
func (r *Result) hostCPU(before, after hostTicks, sagas int) {
	busy, idle, steal := after.busy-before.busy, after.idle-before.idle, after.steal-before.steal
	total := busy + idle + steal
	if total <= 0 || sagas <= 0 {
		return
	}
	r.HostCPUSecPerSaga = float64(busy) / userHZ / float64(sagas)
	r.HostBusy = float64(busy) / float64(total)
	r.HostSteal = float64(steal) / float64(total)
}
