package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// procCount is what a counting shim saw: iptables and nft processes.
type procCount struct {
	Total int            // every process counted
	Own   int            // started by this process (cninet, in-process), not by a plugin
	Setup int            // this process's one-time probes (`--version`, knftables' `--check`), not in Total
	ByCmd map[string]int // per command and verb, for the processes in Total
	Own1  map[string]int // per command and verb, for the processes in Own
	// OwnTime is the wall time of Own's processes per command and verb,
	// summed (overlapping ones count each).
	OwnTime map[string]time.Duration
}

// String is e.g. "6 (iptables-save 2, iptables-restore 4)".
func (p procCount) String() string { return fmt.Sprintf("%d (%s)", p.Total, breakdown(p.ByCmd)) }

// OwnString is the same for the processes this program started itself.
func (p procCount) OwnString() string { return fmt.Sprintf("%d (%s)", p.Own, breakdown(p.Own1)) }

// OwnTimes is e.g. "`iptables -S` 4 × 6.1 ms, …": what this program's
// own processes took each, on average, and in all.
func (p procCount) OwnTimes() string {
	if p.Own == 0 || len(p.OwnTime) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(p.Own1))
	var sum time.Duration
	for k := range p.Own1 {
		keys = append(keys, k)
		sum += p.OwnTime[k]
	}
	sort.Slice(keys, func(i, j int) bool {
		return p.OwnTime[keys[i]] > p.OwnTime[keys[j]] || (p.OwnTime[keys[i]] == p.OwnTime[keys[j]] && keys[i] < keys[j])
	})
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("`%s` %d × %s", k, p.Own1[k], ms(p.OwnTime[k]/time.Duration(max(p.Own1[k], 1))))
	}
	return fmt.Sprintf("%s; %s in all", strings.Join(parts, ", "), ms(sum))
}

func breakdown(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return m[keys[i]] > m[keys[j]] || (m[keys[i]] == m[keys[j]] && keys[i] < keys[j]) })
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("`%s` %d", k, m[k])
	}
	return strings.Join(parts, ", ")
}

// shim puts wrappers for iptables and nft first in PATH: each runs the
// real binary and logs its name, its parent's pid, when it started and
// ended (bash's EPOCHREALTIME, no extra process) and its arguments.
// Handles opened before the shim was installed keep the real binaries'
// paths (go-iptables and knftables look them up once), so whatever is to
// be counted must be opened while it is installed.
type shim struct {
	dir, log string
	oldPath  string
}

var shimmed = []string{"iptables", "ip6tables", "iptables-save", "ip6tables-save", "iptables-restore", "ip6tables-restore", "nft"}

func installShim() (*shim, error) {
	dir, err := os.MkdirTemp("", "bench-shim-")
	if err != nil {
		return nil, err
	}
	s := &shim{dir: dir, log: filepath.Join(dir, "log"), oldPath: os.Getenv("PATH")}
	for _, name := range shimmed {
		real, err := exec.LookPath(name)
		if err != nil {
			if name == "nft" {
				continue
			}
			os.RemoveAll(dir)
			return nil, err
		}
		script := fmt.Sprintf("#!/bin/bash\ns=$EPOCHREALTIME\n%s \"$@\"\nrc=$?\nprintf '%%s %%s %%s %%s %%s\\n' %s \"$PPID\" \"$s\" \"$EPOCHREALTIME\" \"$*\" >> %s\nexit $rc\n", real, name, s.log)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
	}
	os.Setenv("PATH", dir+":"+s.oldPath)
	return s, nil
}

// remove restores PATH and deletes the wrappers.
func (s *shim) remove() {
	os.Setenv("PATH", s.oldPath)
	os.RemoveAll(s.dir)
}

// reset forgets what was counted so far.
func (s *shim) reset() { os.Remove(s.log) }

// count reads what was started since the last reset.
func (s *shim) count() procCount {
	p := procCount{ByCmd: map[string]int{}, Own1: map[string]int{}, OwnTime: map[string]time.Duration{}}
	raw, _ := os.ReadFile(s.log)
	self := strconv.Itoa(os.Getpid())
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		f := strings.SplitN(line, " ", 5)
		if len(f) < 4 {
			continue
		}
		args := ""
		if len(f) == 5 {
			args = f[4]
		}
		start, _ := strconv.ParseFloat(f[2], 64)
		end, _ := strconv.ParseFloat(f[3], 64)
		key, probe := verb(f[0], strings.Fields(args))
		if probe && f[1] == self {
			p.Setup++ // opening a handle, once per Configurator
			continue
		}
		p.Total++
		p.ByCmd[key]++
		if f[1] == self {
			p.Own++
			p.Own1[key]++
			p.OwnTime[key] += time.Duration((end - start) * float64(time.Second))
		}
	}
	return p
}

// verb names a command line by its command and what it does, and says
// whether it is a one-time probe of a handle being opened.
func verb(cmd string, args []string) (string, bool) {
	for i, a := range args {
		switch {
		case a == "--version" || a == "-V":
			return cmd + " --version", true
		case a == "--check" || a == "-c":
			return cmd + " --check", true
		}
		if cmd == "nft" {
			switch a {
			case "-f":
				return "nft -f", false
			case "list", "flush", "delete", "add":
				w := []string{"nft", a}
				if i+1 < len(args) {
					w = append(w, args[i+1])
				}
				return strings.Join(w, " "), false
			}
			continue
		}
		if strings.HasPrefix(a, "-") && len(a) == 2 && strings.Contains("ACDINFXSLZP", a[1:]) {
			return cmd + " " + a, false
		}
	}
	return cmd, false
}

// memUse is what one measured call cost in memory.
type memUse struct {
	// HeapPeak is the highest Go HeapInuse seen (sampled every 5 ms)
	// minus HeapInuse before, after a forced collection.
	HeapPeak uint64
	// Alloc is the bytes the Go heap allocated meanwhile (TotalAlloc delta).
	Alloc uint64
	// HWM is the process's peak resident set (VmHWM, reset through
	// /proc/self/clear_refs before) minus its VmRSS before; 0 if the
	// kernel did not allow the reset.
	HWM     uint64
	Samples int
}

// memSampler samples the Go heap in a goroutine while a call runs.
type memSampler struct {
	before  runtime.MemStats
	rssKB   uint64
	hwmOK   bool
	stop    chan struct{}
	done    sync.WaitGroup
	peak    uint64
	samples int
}

func startMem() *memSampler {
	m := &memSampler{stop: make(chan struct{})}
	runtime.GC()
	runtime.ReadMemStats(&m.before)
	m.rssKB = procStatus("VmRSS")
	m.hwmOK = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) == nil
	m.peak = m.before.HeapInuse
	m.done.Add(1)
	go func() {
		defer m.done.Done()
		t := time.NewTicker(5 * time.Millisecond)
		defer t.Stop()
		var ms runtime.MemStats
		for {
			select {
			case <-m.stop:
				return
			case <-t.C:
				runtime.ReadMemStats(&ms)
				m.peak = max(m.peak, ms.HeapInuse)
				m.samples++
			}
		}
	}()
	return m
}

func (m *memSampler) end() memUse {
	close(m.stop)
	m.done.Wait()
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	m.peak = max(m.peak, after.HeapInuse)
	u := memUse{HeapPeak: m.peak - m.before.HeapInuse, Alloc: after.TotalAlloc - m.before.TotalAlloc, Samples: m.samples}
	if hwm := procStatus("VmHWM"); m.hwmOK && hwm > m.rssKB {
		u.HWM = (hwm - m.rssKB) * 1024
	}
	return u
}

// procStatus reads a kB field of /proc/self/status.
func procStatus(field string) uint64 {
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// cpuUse is the CPU time a call took: in this process (Go code, the
// kernel work of its own syscalls) and in the child processes it waited
// for (iptables, nft). Self and Children are user + system; SelfSys and
// ChildrenSys their system (kernel) share.
type cpuUse struct {
	Self, Children       time.Duration
	SelfSys, ChildrenSys time.Duration
	// HeapAlloc is the bytes the Go heap allocated meanwhile, GCs the
	// collections that ended meanwhile (in the whole process).
	HeapAlloc uint64
	GCs       int
}

// cpuMark is the CPU used so far, in this process and its waited-for
// children, and the Go heap's allocations and collections so far.
type cpuMark struct {
	usage [2]syscall.Rusage
	heap  [2]metrics.Sample // bytes allocated, GC cycles
}

func markCPU() (m cpuMark) {
	syscall.Getrusage(syscall.RUSAGE_SELF, &m.usage[0])
	syscall.Getrusage(syscall.RUSAGE_CHILDREN, &m.usage[1])
	m.heap = [2]metrics.Sample{{Name: "/gc/heap/allocs:bytes"}, {Name: "/gc/cycles/total:gc-cycles"}}
	metrics.Read(m.heap[:])
	return m
}

func (m cpuMark) since() cpuUse {
	now := markCPU()
	total := func(a, b syscall.Rusage) time.Duration {
		return time.Duration(b.Utime.Nano()+b.Stime.Nano()-a.Utime.Nano()-a.Stime.Nano()) * time.Nanosecond
	}
	sys := func(a, b syscall.Rusage) time.Duration {
		return time.Duration(b.Stime.Nano()-a.Stime.Nano()) * time.Nanosecond
	}
	u := cpuUse{Self: total(m.usage[0], now.usage[0]), Children: total(m.usage[1], now.usage[1]),
		SelfSys: sys(m.usage[0], now.usage[0]), ChildrenSys: sys(m.usage[1], now.usage[1])}
	if m.heap[0].Value.Kind() == metrics.KindUint64 && m.heap[1].Value.Kind() == metrics.KindUint64 {
		u.HeapAlloc = now.heap[0].Value.Uint64() - m.heap[0].Value.Uint64()
		u.GCs = int(now.heap[1].Value.Uint64() - m.heap[1].Value.Uint64())
	}
	return u
}

func (c cpuUse) String() string {
	return fmt.Sprintf("CPU: %s in cninet (Go), %s in the processes it ran", short(c.Self), short(c.Children))
}

// split is c with user and system time apart, for cninet and for the
// processes it ran.
func (c cpuUse) split() string {
	return fmt.Sprintf("cninet %s user + %s system; its processes %s user + %s system",
		short(c.Self-c.SelfSys), short(c.SelfSys), short(c.Children-c.ChildrenSys), short(c.ChildrenSys))
}

func mib(b uint64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }
