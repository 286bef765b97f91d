package main

import (
	"fmt"
	"strings"
	"testing"
	"time"

	gocni "github.com/containerd/go-cni"
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
	got := l.cycle().Registry
	want := registryTime{Setup: 2012500 * time.Nanosecond, Proof: 300 * time.Microsecond, Removal: 1250 * time.Microsecond}
	if got != want {
		t.Errorf("cycle's registry time %+v, want %+v", got, want)
	}
	if got.teardown() != 1550*time.Microsecond {
		t.Errorf("Teardown's registry time %v, want 1.55ms (proof + removal)", got.teardown())
	}
	if next := l.cycle(); next != (cyclePhases{}) {
		t.Errorf("the next cycle starts with %+v, want nothing", next)
	}
	// take (after the warm-up) forgets what was read so far too.
	l.Write([]byte(`2026-11-25T05:00:00.000Z [DEBUG] attachment recorded: alloc_id=w network=n1 record=3ms`))
	l.take()
	if next := l.cycle(); next != (cyclePhases{}) {
		t.Errorf("after take, the cycle starts with %+v, want nothing", next)
	}
}

// Every timed phase of a cycle is summed over its networks, the locks
// and the finding per operation; what the phases leave of each half is
// its outside time.
func TestCyclePhasesAreSummedPerCycleAndLeaveTheOutside(t *testing.T) {
	l := &cleanupLog{}
	for _, line := range []string{
		`2026-11-25T05:00:00.000Z [DEBUG] attachments found: alloc_id=a operation=setup networks=2 lock="310µs" find="90µs"`,
		`2026-11-25T05:00:00.000Z [DEBUG] attachment recorded: alloc_id=a network=n1 record=1ms`,
		`2026-11-25T05:00:00.000Z [DEBUG] network attached: alloc_id=a network=n1 attempt=1 duration=40ms`,
		`2026-11-25T05:00:00.000Z [DEBUG] network attached: alloc_id=a network=n2 attempt=1 duration="41.5ms"`,
		`2026-11-25T05:00:00.000Z [DEBUG] attachments found: alloc_id=a operation=teardown networks=2 lock=1ms find=2ms`,
		`2026-11-25T05:00:00.000Z [DEBUG] network detached: alloc_id=a network=n1 prevent=1.2ms del=203.5ms cleanup=1.4ms record="300µs"`,
		`2026-11-25T05:00:00.000Z [DEBUG] network detached: alloc_id=a network=n2 prevent="800µs" del=200ms cleanup="600µs" record=0s`,
		`2026-11-25T05:00:00.000Z [DEBUG] attachment forgotten: alloc_id=a network=n1 record="500µs"`,
	} {
		l.Write([]byte(line))
	}
	got := l.cycle()
	want := cyclePhases{
		Registry: registryTime{Setup: time.Millisecond, Proof: 300 * time.Microsecond, Removal: 500 * time.Microsecond},
		Add:      81500 * time.Microsecond, Prevent: 2 * time.Millisecond, Del: 403500 * time.Microsecond, Cleanup: 2 * time.Millisecond,
		SetupLock: 310 * time.Microsecond, SetupFind: 90 * time.Microsecond, TeardownLock: time.Millisecond, TeardownFind: 2 * time.Millisecond,
	}
	if got != want {
		t.Fatalf("cycle's phases\n%+v, want\n%+v", got, want)
	}
	if out := got.setupOutside(90 * time.Millisecond); out != 7500*time.Microsecond {
		t.Errorf("Setup of 90ms: outside %v, want 7.5ms (− ADDs 81.5ms − registry 1ms)", out)
	}
	if out := got.teardownOutside(420 * time.Millisecond); out != 12*time.Millisecond {
		t.Errorf("Teardown of 420ms: outside %v, want 12ms (− prevention 2ms − DEL 403.5ms − cleanup 2ms − removal 0.5ms)", out)
	}
}

// The Teardown table sets cninet's DEL against go-cni's Remove, adds
// cninet's own phases and the outside time, and the parts sum up to the
// difference.
func TestPhaseTableSumsTheTeardownsParts(t *testing.T) {
	msd := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	o := overheadResult{
		Lib: sample{msd(300)}, Direct: sample{msd(290)},
		LibSetup: sample{msd(150)}, DirectSetup: sample{msd(148)},
		LibTeardown: sample{msd(150)}, DirectTeardown: sample{msd(142)}, ControlTeardown: sample{msd(145)},
		LibAdd: sample{msd(147)}, LibDel: sample{msd(143)}, CyclePrevent: sample{msd(2)}, CycleCleanup: sample{msd(3)},
		RecordSetup: sample{msd(0.5)}, RecordProof: sample{msd(0.25)}, RecordRemoval: sample{msd(1)}, RecordTeardown: sample{msd(1.25)},
		SetupOutside: sample{msd(2.5)}, TeardownOutside: sample{msd(1)},
		TeardownLock: sample{msd(0.25)}, TeardownFind: sample{msd(0.5)},
	}
	var b strings.Builder
	phaseTable(func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }, []overheadResult{o}, []string{"set"})
	var rows []string
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.HasPrefix(line, "| set |") {
			rows = append(rows, line)
		}
	}
	if len(rows) != 4 {
		t.Fatalf("%d rows of the set, want 4 (Setup, Teardown, paired, registry):\n%s", len(rows), b.String())
	}
	cells := strings.Split(rows[1], " | ")
	if len(cells) != 14 {
		t.Fatalf("Teardown row %q: %d cells, want 14", rows[1], len(cells))
	}
	for i, want := range map[int]string{
		2:  "+8.0 ms",                     // cninet − go-cni
		3:  "+3.0 ms",                     // the control's difference
		4:  "+1.0 ms",                     // DEL − Remove
		5:  "+2.0 ms",                     // prevention, the proof inside it
		6:  "+3.0 ms",                     // cleanup
		7:  "1.00 ms",                     // the removal
		8:  "+1.0 ms",                     // outside
		9:  "0.25 ms / 0.50 ms / 0.25 ms", // lock, finding, rest
		10: "+8.0 ms",                     // the sum: 1 + 2 + 3 + 1 + 1
	} {
		if cells[i] != want {
			t.Errorf("Teardown cell %d is %q, want %q (row %s)", i, cells[i], want, rows[1])
		}
	}
	setup := strings.Split(rows[0], " | ")
	if setup[4] != "-1.0 ms" || setup[8] != "+2.0 ms" {
		t.Errorf("Setup row %s: ADD − Setup %q, sum %q; want -1.0 ms and +2.0 ms (−1 + 0.5 + 2.5)", rows[0], setup[4], setup[8])
	}
	if want := "0.50 ms + 1.25 ms (proof 0.25 ms, removal 1.00 ms) = **1.75 ms** | 0.6% |"; !strings.HasSuffix(rows[3], want) {
		t.Errorf("registry row %q, want it to end %q", rows[3], want)
	}
}

// A paired difference is the mean over the rounds of each cycle minus
// the other contender's cycle of the same round, with the standard error
// of that mean; pairs beyond the shorter sample do not count.
func TestPairedDifferenceIsTheMeanOfTheRoundsWithItsStandardError(t *testing.T) {
	msd := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	for _, tc := range []struct {
		name     string
		a, b     sample
		mean, se time.Duration
		n        int
	}{
		{"no pairs", nil, sample{msd(1)}, 0, 0, 0},
		{"one pair has no error", sample{msd(12)}, sample{msd(10)}, msd(2), 0, 1},
		{"a constant difference has no error", sample{msd(12), msd(20), msd(7)}, sample{msd(10), msd(18), msd(5)}, msd(2), 0, 3},
		// differences 1, 3, 5, 7: mean 4, s.d. √(20/3), s.e. √(20/3)/2
		{"differences spread", sample{msd(11), msd(13), msd(15), msd(17), msd(99)}, sample{msd(10), msd(10), msd(10), msd(10)}, msd(4), 1290994 * time.Nanosecond, 4},
	} {
		mean, se, n := pairedDiff(tc.a, tc.b)
		if mean != tc.mean || n != tc.n || (se-tc.se).Abs() > time.Microsecond {
			t.Errorf("%s: mean %v ± %v over %d, want %v ± %v over %d", tc.name, mean, se, n, tc.mean, tc.se, tc.n)
		}
	}
}

// Over six rounds with a control, each contender runs first, second and
// third twice, and within the rounds follows each other contender twice.
func TestOrderBalancesPlaceAndPredecessor(t *testing.T) {
	b := &bench{control: fakeCNI{}}
	place := map[[2]contender]int{}
	follows := map[[2]contender]int{}
	for i := range 6 {
		o := b.order(i)
		if len(o) != 3 {
			t.Fatalf("round %d: %v, want three contenders", i, o)
		}
		for j, who := range o {
			place[[2]contender{who, contender(j)}]++
			if j > 0 {
				follows[[2]contender{who, o[j-1]}]++
			}
		}
	}
	for _, who := range []contender{viaCninet, viaGoCNI, viaControl} {
		for j := range 3 {
			if n := place[[2]contender{who, contender(j)}]; n != 2 {
				t.Errorf("contender %d in place %d %d times, want 2", who, j, n)
			}
		}
		for _, prev := range []contender{viaCninet, viaGoCNI, viaControl} {
			if want, n := map[bool]int{true: 0, false: 2}[who == prev], follows[[2]contender{who, prev}]; n != want {
				t.Errorf("contender %d follows %d %d times, want %d", who, prev, n, want)
			}
		}
	}
	if two := (&bench{}).order(1); len(two) != 2 || two[0] != viaGoCNI {
		t.Errorf("without a control, round 1 is %v, want go-cni first of two", two)
	}
}

// fakeCNI stands for the control's go-cni where only its presence counts.
type fakeCNI struct{ gocni.CNI }
