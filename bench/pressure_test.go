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
