package main

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

func TestDetachedLineFieldsAreReadQuotedOrNot(t *testing.T) {
	for _, line := range []string{
		`2026-11-25T05:00:00.000Z [DEBUG] network detached: alloc_id=a network=n prevent="207.3µs" del=203.5ms cleanup="812µs"`,
		`2026-11-25T05:00:00.000Z [DEBUG] network detached: alloc_id=a network=n prevent=1.2ms del=203.5ms cleanup=1.4ms`,
		`2026-11-25T05:00:00.000Z [DEBUG] network detached: alloc_id=a network=n prevent="207.3µs" del=203.5ms cleanup="812µs" record="95.1µs"`,
		`2026-11-25T05:00:00.000Z [DEBUG] network detached: alloc_id=a network=n prevent=1.2ms del=203.5ms cleanup=1.4ms record=1.1ms`,
	} {
		l := &cleanupLog{}
		l.Write([]byte(line))
		cleanup, prevent, _ := l.take()
		if len(cleanup) != 1 || len(prevent) != 1 || cleanup[0] <= 0 || prevent[0] <= 0 {
			t.Errorf("%s: read cleanup %v, prevent %v; want one positive duration each", line, cleanup, prevent)
		}
	}
}

// A cycle's registry time is every record= of its lines, summed per
// kind over its networks: attachment recorded (Setup), network detached
// (the proof before the DEL), attachment forgotten (the removal).
func TestRecordFieldsAreSummedPerCycle(t *testing.T) {
	l := &cleanupLog{}
	for _, line := range []string{
		`2026-11-25T05:00:00.000Z [DEBUG] attachment recorded: alloc_id=a network=n1 record="512.5µs"`,
		`2026-11-25T05:00:00.000Z [DEBUG] attachment recorded: alloc_id=a network=n2 record=1.5ms`,
		`2026-11-25T05:00:00.000Z [DEBUG] network attached: alloc_id=a network=n1 attempt=1 duration=40ms`,
		`2026-11-25T05:00:00.000Z [DEBUG] network detached: alloc_id=a network=n1 prevent=1.2ms del=203.5ms cleanup=1.4ms record="300µs"`,
		`2026-11-25T05:00:00.000Z [DEBUG] network detached: alloc_id=a network=n2 prevent="900µs" del=200ms cleanup="812µs" record=0s`,
		`2026-11-25T05:00:00.000Z [DEBUG] attachment forgotten: alloc_id=a network=n1 record="250µs"`,
		`2026-11-25T05:00:00.000Z [DEBUG] attachment forgotten: alloc_id=a network=n2 record=1ms`,
	} {
		l.Write([]byte(line))
	}
	got := l.cycleRecords()
	want := registryTime{Setup: 2012500 * time.Nanosecond, Proof: 300 * time.Microsecond, Removal: 1250 * time.Microsecond}
	if got != want {
		t.Errorf("cycle's registry time %+v, want %+v", got, want)
	}
	if got.teardown() != 1550*time.Microsecond {
		t.Errorf("Teardown's registry time %v, want 1.55ms (proof + removal)", got.teardown())
	}
	if next := l.cycleRecords(); next != (registryTime{}) {
		t.Errorf("the next cycle starts with %+v, want nothing", next)
	}
	// take (after the warm-up) forgets what was read so far too.
	l.Write([]byte(`2026-11-25T05:00:00.000Z [DEBUG] attachment recorded: alloc_id=w network=n1 record=3ms`))
	l.take()
	if next := l.cycleRecords(); next != (registryTime{}) {
		t.Errorf("after take, the cycle starts with %+v, want nothing", next)
	}
}

// The phase table takes the registry's removal out of the rest and does
// not count its proof twice: it is inside the prevention.
func TestPhaseTableCountsTheRegistryOnce(t *testing.T) {
	msd := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	o := overheadResult{
		Lib: sample{msd(300)}, Direct: sample{msd(290)},
		LibSetup: sample{msd(150)}, DirectSetup: sample{msd(148)},
		LibTeardown: sample{msd(150)}, DirectTeardown: sample{msd(142)},
		Prevent: sample{msd(2)}, Cleanup: sample{msd(3)},
		RecordSetup: sample{msd(0.5)}, RecordProof: sample{msd(0.25)}, RecordRemoval: sample{msd(1)}, RecordTeardown: sample{msd(1.25)},
	}
	var b strings.Builder
	phaseTable(func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }, []overheadResult{o}, []string{"set"})
	var row string
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, "| set |") {
			row = line
		}
	}
	cells := strings.Split(row, " | ")
	if len(cells) != 10 {
		t.Fatalf("row %q: %d cells, want 10", row, len(cells))
	}
	for i, want := range map[int]string{
		2: "0.50 ms", // the record around the ADD
		4: "+8.0 ms", // Teardown − Remove
		5: "2.0 ms",  // prevention, the proof inside it
		7: "1.00 ms", // the removal
		8: "+2.0 ms", // 8 − 2 − 3 − 1: the proof not taken out again
	} {
		if cells[i] != want {
			t.Errorf("cell %d is %q, want %q (row %s)", i, cells[i], want, row)
		}
	}
	if want := "0.50 ms + 1.25 ms (proof 0.25 ms, removal 1.00 ms) = **1.75 ms**, 0.6% of the cycle |"; cells[9] != want {
		t.Errorf("registry in all is %q, want %q", cells[9], want)
	}
}
