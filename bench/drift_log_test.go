package main

import (
	"testing"
	"time"
)

func TestTheWatchersLogIsReadForRepairsRefusalsAndFailures(t *testing.T) {
	l := &driftLog{}
	t0 := time.Now()
	for _, line := range []string{
		`2026-11-28T07:35:55.541Z [INFO]  attachment repaired: alloc_id=drift-0-0001 network=drift0 ifname=eth0 restored=["a"] duration=257ms`,
		`2026-11-28T07:35:55.541Z [INFO]  attachment repaired: alloc_id=drift-0-0002 network=drift0 ifname=eth0 restored=["a"] duration=257ms`,
		`2026-11-28T07:35:55.541Z [INFO]  attachment repaired: alloc_id=drift-0-0001 network=drift0 ifname=eth0 restored=["b"] duration=257ms`,
		`2026-11-28T07:35:55.541Z [ERROR] repair watcher: drift keeps coming back: another program removes this attachment's rules; not repairing it for now: alloc_id=drift-0-0003`,
		`2026-11-28T07:35:55.541Z [ERROR] attachment repair incomplete: alloc_id=drift-0-0004 error="restoring portmap's ADD: exit 1"`,
		`2026-11-28T07:35:55.541Z [DEBUG] network attached: alloc_id=x duration=40ms`,
	} {
		l.Write([]byte(line + "\n"))
	}
	if n := l.repairCount(); n != 3 {
		t.Errorf("%d repairs read, want 3", n)
	}
	if n := l.refusals(); n != 1 {
		t.Errorf("%d refusals read, want 1", n)
	}
	if f := l.failures(); len(f) != 1 || f[0][:7] != "[ERROR]" {
		t.Errorf("failures %q, want the incomplete repair's line without its time", f)
	}
	if whole, repairs := l.since(t0, 2); whole <= 0 || repairs != 3 {
		t.Errorf("2 distinct repaired after %v with %d repairs; want a time, and 3", whole, repairs)
	}
	if whole, _ := l.since(t0, 3); whole != 0 {
		t.Errorf("3 distinct repaired after %v; only 2 were", whole)
	}
	if _, repairs := l.since(time.Now().Add(time.Hour), 1); repairs != 0 {
		t.Errorf("%d repairs after a time none came", repairs)
	}
}

func TestSpreadIsTheFirstAndLastAnswerAndWhetherAllDid(t *testing.T) {
	for _, c := range []struct {
		name        string
		at          []time.Duration
		first, last time.Duration
		all         bool
	}{
		{"all answered", []time.Duration{3, 1, 2}, 1, 3, true},
		{"one never answered", []time.Duration{3, 0, 2}, 2, 3, false},
		{"none", nil, 0, 0, false},
	} {
		first, last, all := repairSpan(c.at)
		if first != c.first || last != c.last || all != c.all {
			t.Errorf("%s: spread = %v, %v, %v; want %v, %v, %v", c.name, first, last, all, c.first, c.last, c.all)
		}
	}
}
