package main

import (
	"regexp"
	"strconv"
	"strings"
	"time"
)

// hostWork is where one phase of a detach (the prevention or the force
// cleanup) spent its time on the host, as cninet's "host work timed"
// line says it: its reads and writes by kind, counted and timed, summed
// over the cycle's networks; Longest is the longest single step of them.
type hostWork struct {
	Tries                                                            int // runs of the phase (more than 1: it met a held xtables lock)
	Probes, Lists, Files, Writes, LockWaits, RegistryReads, Execs    int
	ProbeTime, ListTime, FileTime, WriteTime, LockTime, RegistryTime time.Duration
	ListedLines, ListedBytes                                         int
	Longest                                                          string
	LongestTime                                                      time.Duration
	// StepCPU is the steps' CPU time, Preempted how often their thread
	// lost its CPU to another runnable thread, Hopped the steps that
	// moved threads (in neither).
	StepCPU           time.Duration
	Preempted, Hopped int
}

// steps is the time of every step together.
func (w hostWork) steps() time.Duration {
	return w.ProbeTime + w.ListTime + w.FileTime + w.WriteTime + w.LockTime + w.RegistryTime
}

// add adds another network's phase to w.
func (w *hostWork) add(o hostWork) {
	w.Tries += o.Tries
	w.Probes, w.Lists, w.Files, w.Writes, w.LockWaits, w.Execs = w.Probes+o.Probes, w.Lists+o.Lists, w.Files+o.Files, w.Writes+o.Writes, w.LockWaits+o.LockWaits, w.Execs+o.Execs
	w.ProbeTime, w.ListTime, w.FileTime, w.WriteTime, w.LockTime = w.ProbeTime+o.ProbeTime, w.ListTime+o.ListTime, w.FileTime+o.FileTime, w.WriteTime+o.WriteTime, w.LockTime+o.LockTime
	w.RegistryReads, w.RegistryTime = w.RegistryReads+o.RegistryReads, w.RegistryTime+o.RegistryTime
	w.StepCPU, w.Preempted, w.Hopped = w.StepCPU+o.StepCPU, w.Preempted+o.Preempted, w.Hopped+o.Hopped
	w.ListedLines, w.ListedBytes = w.ListedLines+o.ListedLines, w.ListedBytes+o.ListedBytes
	if o.LongestTime > w.LongestTime {
		w.Longest, w.LongestTime = o.Longest, o.LongestTime
	}
}

var (
	hostWorkLine = regexp.MustCompile(`host work timed:.* phase=(\w+) (.*)`)
	// hclog writes key=value, the value quoted when it has a space or a
	// non-ASCII character (µs).
	logField = regexp.MustCompile(`(\w+)=("(?:[^"\\]|\\.)*"|\S+)`)
)

// parseHostWork reads a "host work timed" line: its phase and its work.
func parseHostWork(p []byte) (phase string, w hostWork, ok bool) {
	m := hostWorkLine.FindSubmatch(p)
	if m == nil {
		return "", hostWork{}, false
	}
	ints := map[string]*int{"tries": &w.Tries, "probes": &w.Probes, "lists": &w.Lists, "files": &w.Files, "writes": &w.Writes,
		"lock_waits": &w.LockWaits, "registry_reads": &w.RegistryReads, "execs": &w.Execs, "preempted": &w.Preempted, "hopped": &w.Hopped, "listed_lines": &w.ListedLines, "listed_bytes": &w.ListedBytes}
	durations := map[string]*time.Duration{"probe_time": &w.ProbeTime, "list_time": &w.ListTime, "file_time": &w.FileTime,
		"write_time": &w.WriteTime, "lock_time": &w.LockTime, "registry_time": &w.RegistryTime, "longest_time": &w.LongestTime, "step_cpu": &w.StepCPU}
	for _, f := range logField.FindAllSubmatch(m[2], -1) {
		key, val := string(f[1]), string(f[2])
		if s, err := strconv.Unquote(val); err == nil {
			val = s
		}
		switch {
		case ints[key] != nil:
			*ints[key], _ = strconv.Atoi(val)
		case durations[key] != nil:
			*durations[key], _ = time.ParseDuration(val)
		case key == "longest":
			w.Longest = strings.TrimSpace(val)
		}
	}
	return string(m[1]), w, true
}
