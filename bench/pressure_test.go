package main

import (
	"errors"
	"strings"
	"testing"
	"time"
)

// Cycles run concurrently under pressure: each line's phase goes to the
// cycle its alloc_id names, never to another running meanwhile.
func TestPressureLogSumsEachCyclesPhasesByItsAllocID(t *testing.T) {
	l := &pressureLog{phases: map[string]*cyclePhases{}}
	for _, line := range []string{
		`2026-11-27T17:00:00.000Z [DEBUG] attachment recorded: alloc_id=pr-1000-0 network=n1 record=1ms`,
		`2026-11-27T17:00:00.000Z [DEBUG] attachment recorded: alloc_id=pr-1000-2 network=n1 record=5ms`,
		`2026-11-27T17:00:00.000Z [DEBUG] attachments found: alloc_id=pr-1000-0 operation=teardown networks=1 lock=1ms find=2ms`,
		`2026-11-27T17:00:00.000Z [DEBUG] network detached: alloc_id=pr-1000-2 network=n1 prevent=9ms del=90ms cleanup=7ms record="300µs"`,
		`2026-11-27T17:00:00.000Z [DEBUG] network detached: alloc_id=pr-1000-0 network=n1 prevent="1.2ms" del=203.5ms cleanup=1.4ms record="200µs"`,
		`2026-11-27T17:00:00.000Z [DEBUG] attachment forgotten: alloc_id=pr-1000-0 network=n1 record="500µs"`,
	} {
		l.Write([]byte(line))
	}
	for _, tc := range []struct {
		id   string
		want cyclePhases
	}{
		{"pr-1000-0", cyclePhases{Registry: registryTime{Setup: time.Millisecond, Proof: 200 * time.Microsecond, Removal: 500 * time.Microsecond},
			Prevent: 1200 * time.Microsecond, Del: 203500 * time.Microsecond, Cleanup: 1400 * time.Microsecond,
			TeardownLock: time.Millisecond, TeardownFind: 2 * time.Millisecond}},
		{"pr-1000-2", cyclePhases{Registry: registryTime{Setup: 5 * time.Millisecond, Proof: 300 * time.Microsecond},
			Prevent: 9 * time.Millisecond, Del: 90 * time.Millisecond, Cleanup: 7 * time.Millisecond}},
	} {
		if got, ok := l.of(tc.id); !ok || got != tc.want {
			t.Errorf("%s: phases\n%+v, want\n%+v", tc.id, got, tc.want)
		}
	}
	if _, ok := l.of("pr-1000-1"); ok {
		t.Error("a cycle that logged nothing has phases")
	}
}

// The host's shape is kube-proxy's: seven rules a service, each service's
// chains declared before any rule jumps to them, and removed whole.
func TestKubeShapeHasSevenRulesAServiceAndIsRemovedWhole(t *testing.T) {
	s := newKubeShape(70)
	in := string(s.iptablesRestore())
	rules := strings.Count(in, "\n-A KUBE-SERVICES ") + strings.Count(in, "\n-A KUBE-SVC-") + strings.Count(in, "\n-A KUBE-SEP-")
	if rules != 70 {
		t.Errorf("%d service rules for 70 asked, want 70 (10 services of 7)", rules)
	}
	for i := range s.services {
		for _, c := range []string{svcChain(i), sepChain(i, 0), sepChain(i, 1)} {
			decl, use := strings.Index(in, ":"+c+" "), strings.Index(in, "-j "+c+"\n")
			if decl < 0 || use < 0 || decl > use {
				t.Fatalf("chain %s: declared at %d, jumped to at %d", c, decl, use)
			}
			if !strings.Contains(string(s.iptablesRemoval()), "-X "+c+"\n") {
				t.Errorf("the removal keeps chain %s", c)
			}
		}
	}
	n := 0 // the nftables shape's rules: every line inside a chain but its hook
	for _, line := range strings.Split(string(s.nftScript()), "\n") {
		if strings.HasPrefix(line, "\t\t") && !strings.Contains(line, " hook ") {
			n++
		}
	}
	if n != 70+2 {
		t.Errorf("nftables shape: %d rules, want the 70 asked, the prerouting jump and the masquerade mark", n)
	}
}

func TestPressureFailuresAreKeptDistinctPerContenderWithTheirCount(t *testing.T) {
	var p pressureResult
	killed := errors.New(`setup: plugin type="portmap" failed (add): signal: killed`)
	p.noteFailure("go-cni", killed)
	p.noteFailure("go-cni", killed)
	p.noteFailure("cninet", errors.New("teardown of allocation pr-7000-4: cleanup incomplete"))
	p.noteFailure("cninet", errors.New("teardown of allocation pr-7000-6: cleanup incomplete"))
	want := []string{`go-cni: setup: plugin type="portmap" failed (add): signal: killed (×2)`,
		"cninet: teardown of allocation <id>: cleanup incomplete (×2)"}
	if strings.Join(p.Failures, "\n") != strings.Join(want, "\n") {
		t.Errorf("failures\n%s\nwant\n%s", strings.Join(p.Failures, "\n"), strings.Join(want, "\n"))
	}
}

// The prevention's and the cleanup's host work are parsed from their
// "host work timed" lines, each to its own phase, quoted values too.
func TestPressureLogReadsEachPhasesHostWork(t *testing.T) {
	l := &pressureLog{phases: map[string]*cyclePhases{}}
	for _, line := range []string{
		`2026-11-28T15:00:00.000Z [DEBUG] host work timed: alloc_id=pr-7000-0 network=bench2 phase=prevent tries=1 probes=2 probe_time="412µs" lists=0 list_time=0s listed_lines=0 listed_bytes=0 files=1 file_time="80µs" writes=0 write_time=0s lock_waits=0 lock_time=0s registry_reads=1 registry_time=3ms execs=0 longest="iptables probe nat/CNI-DN-0123" longest_time="300µs" step_cpu="250µs" preempted=2 hopped=1`,
		`2026-11-28T15:00:00.000Z [DEBUG] host work timed: alloc_id=pr-7000-0 network=bench2 phase=cleanup tries=2 probes=3 probe_time=1.5ms lists=1 list_time=1.2s listed_lines=41 listed_bytes=3100 files=0 file_time=0s writes=1 write_time=20ms lock_waits=1 lock_time=2ms execs=2 longest="iptables nat/POSTROUTING" longest_time=1.2s`,
	} {
		l.Write([]byte(line))
	}
	got, _ := l.of("pr-7000-0")
	wantPrevent := hostWork{Tries: 1, Probes: 2, ProbeTime: 412 * time.Microsecond, Files: 1, FileTime: 80 * time.Microsecond,
		RegistryReads: 1, RegistryTime: 3 * time.Millisecond, StepCPU: 250 * time.Microsecond, Preempted: 2, Hopped: 1,
		Longest: "iptables probe nat/CNI-DN-0123", LongestTime: 300 * time.Microsecond}
	wantCleanup := hostWork{Tries: 2, Probes: 3, ProbeTime: 1500 * time.Microsecond, Lists: 1, ListTime: 1200 * time.Millisecond,
		ListedLines: 41, ListedBytes: 3100, Writes: 1, WriteTime: 20 * time.Millisecond, LockWaits: 1, LockTime: 2 * time.Millisecond,
		Execs: 2, Longest: "iptables nat/POSTROUTING", LongestTime: 1200 * time.Millisecond}
	if got.PreventWork != wantPrevent {
		t.Errorf("prevention's work\n%+v, want\n%+v", got.PreventWork, wantPrevent)
	}
	if got.CleanupWork != wantCleanup {
		t.Errorf("cleanup's work\n%+v, want\n%+v", got.CleanupWork, wantCleanup)
	}
}
