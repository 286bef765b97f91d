package main

import (
	"fmt"
	"os"
	"path/filepath"
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
