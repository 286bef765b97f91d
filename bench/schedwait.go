package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/metrics"
	"slices"
	"time"
)

// schedTimes is how long the bench's threads ran on a CPU and waited in
// the kernel's run queue, summed over every thread (the fields of
// /proc/<pid>/task/<tid>/schedstat). On a host with more runnable
// threads than cores, every step that gives up its CPU (a netlink
// answer, a file read, a child's exit) waits there before it runs on:
// the wait per CPU millisecond says how much.
type schedTimes struct{ OnCPU, Waited time.Duration }

// ownSchedTimes sums the bench's threads' schedstat; a thread that exits
// between two readings takes its times with it (the Go runtime keeps its
// threads).
func ownSchedTimes() schedTimes {
	var t schedTimes
	paths, _ := filepath.Glob("/proc/self/task/*/schedstat")
	for _, p := range paths {
		raw, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var cpu, wait int64
		if n, _ := fmt.Sscanf(string(raw), "%d %d", &cpu, &wait); n == 2 {
			t.OnCPU += time.Duration(cpu)
			t.Waited += time.Duration(wait)
		}
	}
	return t
}

// since is what the threads ran and waited since before.
func (t schedTimes) since(before schedTimes) schedTimes {
	return schedTimes{OnCPU: t.OnCPU - before.OnCPU, Waited: t.Waited - before.Waited}
}

// waitPerCPU is the run-queue wait per millisecond on a CPU.
func (t schedTimes) waitPerCPU() float64 {
	if t.OnCPU <= 0 {
		return 0
	}
	return float64(t.Waited) / float64(t.OnCPU)
}

// goSchedLatencies is the Go runtime's histogram of how long goroutines
// waited runnable before they ran (/sched/latencies:seconds): the bench
// runs cninet, go-cni and the 16 workers in one process, so a goroutine
// cninet hands work to queues behind theirs for one of GOMAXPROCS Ps.
type goSchedLatencies struct {
	counts  []uint64
	buckets []float64
}

func readGoSchedLatencies() goSchedLatencies {
	s := []metrics.Sample{{Name: "/sched/latencies:seconds"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindFloat64Histogram {
		return goSchedLatencies{}
	}
	h := s[0].Value.Float64Histogram()
	return goSchedLatencies{counts: slices.Clone(h.Counts), buckets: h.Buckets}
}

// percentileSince is the q-th percentile (0 < q < 100) of the waits since
// before, to the upper bound of its bucket; 0 when none was counted.
func (l goSchedLatencies) percentileSince(before goSchedLatencies, q float64) time.Duration {
	if len(l.counts) == 0 || len(before.counts) != len(l.counts) {
		return 0
	}
	var total uint64
	delta := make([]uint64, len(l.counts))
	for i := range l.counts {
		delta[i] = l.counts[i] - before.counts[i]
		total += delta[i]
	}
	if total == 0 {
		return 0
	}
	rank := uint64(math.Ceil(float64(total) * q / 100))
	var seen uint64
	for i, n := range delta {
		seen += n
		if seen >= rank {
			upper := l.buckets[i+1]
			if math.IsInf(upper, 1) {
				upper = l.buckets[i]
			}
			return time.Duration(upper * float64(time.Second))
		}
	}
	return 0
}
