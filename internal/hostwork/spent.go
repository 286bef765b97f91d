package hostwork

import (
	"fmt"
	"sync"
	"time"
)

// Spent is where a run's time on the host went: every read and write it
// made, counted and timed by kind, as the run made it. Nothing is read
// to measure it. What a run took beyond the sum of its steps is its own
// work (planning, judging) and waiting to be scheduled.
type Spent struct {
	// Probes are in-kernel looks over netlink: a chain probed, a chain's
	// or table's rules scanned or searched, a rule looked up by handle.
	Probes Tally
	// Lists are listings: iptables -S of a chain or a table,
	// iptables-save, the plugins' nftables tables.
	Lists Tally
	// Files are the reservations, cached results and intent records read.
	Files Tally
	// Writes are deletions applied: by handle, iptables-restore,
	// iptables -D/-F/-X, nftables, files and devices removed.
	Writes Tally
	// LockWaits are the waits for host-local's lock on a reservation
	// directory before its files are removed.
	LockWaits Tally
	// Registry are the host registry's answers to who holds an address
	// (Seams.Records).
	Registry Tally
	// Execs are the iptables, iptables-save and iptables-restore commands
	// run (each a process with the default IPTables).
	Execs int
	// Lines and Bytes are what the listings returned.
	Lines, Bytes int
	// Longest is the longest step (what it was, Longest.Took how long).
	Longest Step
	// StepCPU is the CPU time the steps took, as the kernel counts it for
	// the thread each ran on; the rest of their time they waited: for
	// the host to answer, or in the run queue. Preempted is how often a
	// step's thread had its CPU taken for another runnable thread.
	// Hopped steps moved to another thread midway and are in neither.
	StepCPU   time.Duration
	Preempted int
	Hopped    int
}

// Tally is how many steps of a kind a run made and how long they took
// together.
type Tally struct {
	N    int
	Took time.Duration
}

// Step is one read or write of the host: what it was and how long it took.
type Step struct {
	What string
	Took time.Duration
}

// Total is the time of every step together.
func (s Spent) Total() time.Duration {
	return s.Probes.Took + s.Lists.Took + s.Files.Took + s.Writes.Took + s.LockWaits.Took + s.Registry.Took
}

// LogArgs are s as key-value pairs for a log line (hclog's), each key
// prefixed.
func (s Spent) LogArgs() []any {
	return []any{
		"probes", s.Probes.N, "probe_time", s.Probes.Took,
		"lists", s.Lists.N, "list_time", s.Lists.Took, "listed_lines", s.Lines, "listed_bytes", s.Bytes,
		"files", s.Files.N, "file_time", s.Files.Took,
		"writes", s.Writes.N, "write_time", s.Writes.Took,
		"lock_waits", s.LockWaits.N, "lock_time", s.LockWaits.Took,
		"registry_reads", s.Registry.N, "registry_time", s.Registry.Took,
		"execs", s.Execs, "longest", s.Longest.What, "longest_time", s.Longest.Took,
		"step_cpu", s.StepCPU, "preempted", s.Preempted, "hopped", s.Hopped,
	}
}

// Kind is which Tally of Spent a step counts in.
type Kind int

// The kinds of steps, as Spent counts them.
const (
	Probe Kind = iota
	List
	File
	Write
	LockWait
	Registry
)

// Meter adds up a run's steps; its methods may be called concurrently. A
// nil Meter measures nothing.
type Meter struct {
	mu    sync.Mutex
	spent Spent
}

// Begin starts timing a step of kind; the returned func ends it. exec says
// the step runs a command; lines and bytes are what a listing returned.
func (m *Meter) Begin(kind Kind, what string, exec bool) (end func(lines, bytes int)) {
	if m == nil {
		return func(int, int) {}
	}
	start, clock := time.Now(), readThreadClock()
	return func(lines, bytes int) {
		took, now := time.Since(start), readThreadClock()
		m.mu.Lock()
		defer m.mu.Unlock()
		s := &m.spent
		switch {
		case !clock.ok || !now.ok:
		case now.tid != clock.tid:
			s.Hopped++
		default:
			s.StepCPU += now.cpu - clock.cpu
			s.Preempted += int(now.involuntary - clock.involuntary)
		}
		t := [...]*Tally{Probe: &s.Probes, List: &s.Lists, File: &s.Files, Write: &s.Writes, LockWait: &s.LockWaits, Registry: &s.Registry}[kind]
		t.N++
		t.Took += took
		if exec {
			s.Execs++
		}
		s.Lines += lines
		s.Bytes += bytes
		if took > s.Longest.Took {
			s.Longest = Step{What: what, Took: took}
		}
	}
}

// Take returns what was spent since the last Take.
func (m *Meter) Take() Spent {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.spent
	m.spent = Spent{}
	return s
}

// LinesSize is the bytes of a listing's lines, newlines included.
func LinesSize(lines []string) int {
	n := 0
	for _, l := range lines {
		n += len(l) + 1
	}
	return n
}

// String is s in a few words, for errors and tests.
func (s Spent) String() string {
	return fmt.Sprintf("%d probes %s, %d lists %s (%d lines), %d files %s, %d writes %s, %d lock waits %s, %d registry reads %s, %d execs; longest %q %s; on a CPU %s, preempted %d",
		s.Probes.N, s.Probes.Took, s.Lists.N, s.Lists.Took, s.Lines, s.Files.N, s.Files.Took, s.Writes.N, s.Writes.Took,
		s.LockWaits.N, s.LockWaits.Took, s.Registry.N, s.Registry.Took, s.Execs, s.Longest.What, s.Longest.Took, s.StepCPU, s.Preempted)
}
