package main

import (
	"math"
	"math/rand"
	randv2 "math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"
)

// cycles is n cycles around mid with a log-normal noise of sd.
func cycles(rng *rand.Rand, n int, mid time.Duration, sd float64) sample {
	var s sample
	for range n {
		s = append(s, time.Duration(float64(mid)*math.Exp(rng.NormFloat64()*sd)))
	}
	return s
}

// The spread of two contenders that differ by nothing is the noise of
// their ratio: √2 times the noise of each.
func TestSpreadIsTheNoiseOfTheRatio(t *testing.T) {
	rng := rand.New(rand.NewSource(1))
	base, control := cycles(rng, 4000, 300*time.Millisecond, 0.03), cycles(rng, 4000, 300*time.Millisecond, 0.03)
	if got, want := spread(base, control), math.Sqrt2*0.03; math.Abs(got-want) > 0.1*want {
		t.Fatalf("spread %.4f, want about %.4f", got, want)
	}
	if got := spread(base[:1], control[:1]); !math.IsInf(got, 1) {
		t.Fatalf("one pair has spread %v, want no measure of it (+Inf)", got)
	}
}

func TestARatioWithinTheNoiseIsNotMeasurable(t *testing.T) {
	cases := []struct {
		name string
		call ratioCall
		want string
	}{
		{"well under the target: met", ratioCall{Q: 0.98, Target: 1.03, Margin: 0.01, N: 40}, "met"},
		{"well over the target: missed", ratioCall{Q: 1.06, Target: 1.03, Margin: 0.01, N: 40}, "**missed**"},
		{"under the target within the noise: not measurable", ratioCall{Q: 1.025, Target: 1.03, Margin: 0.01, N: 40}, "not measurable at ±1.0 % noise (40 cycles)"},
		{"over the target within the noise: not measurable", ratioCall{Q: 1.035, Target: 1.03, Margin: 0.01, N: 40}, "not measurable"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.call.verdict(); !strings.HasPrefix(got, tc.want) {
				t.Fatalf("verdict %q, want %q", got, tc.want)
			}
		})
	}
}

// More cycles go where a ratio is within the noise of its target: as
// many as would tell it apart, in whole rotations, never past the limit;
// none where it is told apart already.
func TestMoreCyclesGoWhereTheNoiseHidesTheTarget(t *testing.T) {
	const sd = 0.04
	cases := []struct {
		name        string
		q           float64
		done, limit int
		want        func(int) bool
	}{
		{"told apart: none", 0.95, 40, 120, func(n int) bool { return n == 0 }},
		{"within the noise: some, in rotations of 6", 1.02, 40, 120, func(n int) bool { return n > 0 && n%6 == 0 }},
		{"within the noise, next to the target: up to the limit", 1.0299, 40, 120, func(n int) bool { return n == 80 }},
		{"at the limit already: none", 1.0299, 120, 120, func(n int) bool { return n == 0 }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := moreCycles(tc.q, 1.03, sd, tc.done, 6, tc.limit); !tc.want(got) {
				t.Fatalf("moreCycles = %d", got)
			}
		})
	}
	// What moreCycles asks for does tell the ratio apart.
	n := 40 + moreCycles(1.02, 1.03, sd, 40, 6, 1000)
	if c := (ratioCall{Q: 1.02, Target: 1.03, Margin: noiseMargin(sd, n), N: n}); !c.told() {
		t.Fatalf("after %d cycles the ratio is still within ±%.2f %%", n, 100*c.Margin)
	}
}

// A ratio of p99s is judged at the noise its own cycles show when drawn
// again: two contenders that differ by nothing are not told apart from a
// target 3 % away at a few hundred cycles, a real difference is, and the
// margin narrows as the cycles grow.
func TestAP99RatioIsJudgedAtItsBootstrapNoise(t *testing.T) {
	rng := rand.New(rand.NewSource(7))
	const mid, sd = 2 * time.Second, 0.2
	cases := []struct {
		name       string
		candidate  sample
		base       sample
		want       string
		marginOver float64 // the margin is at least this wide
	}{
		{"the same cycles, 200 of each: not measurable", cycles(rng, 200, mid, sd), cycles(rng, 200, mid, sd), "not measurable", 0.03},
		{"a candidate 40 % slower: missed", cycles(rng, 200, 14*mid/10, sd), cycles(rng, 200, mid, sd), "**missed**", 0},
		{"a candidate 30 % faster: met", cycles(rng, 200, 7*mid/10, sd), cycles(rng, 200, mid, sd), "met", 0},
		{"one cycle each: not measurable", cycles(rng, 1, mid, sd), cycles(rng, 1, mid, sd), "not measurable (1 cycles", math.MaxFloat64},
		{"99 cycles, whose p99 is the slowest, even 30 % faster: not measurable", cycles(rng, 99, 7*mid/10, sd), cycles(rng, 99, mid, sd), "not measurable (99 cycles: too few", math.MaxFloat64},
		{"100 cycles, whose p99 is the second slowest, 30 % faster: met", cycles(rng, 100, 7*mid/10, sd), cycles(rng, 100, mid, sd), "met", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := percentileCall(tc.candidate, tc.base, 99, 1.03)
			if got := c.verdict(); !strings.HasPrefix(got, tc.want) {
				t.Fatalf("p99 ratio %.3f at ±%.1f %%: verdict %q, want %q", c.Q, 100*c.Margin, got, tc.want)
			}
			if c.Margin < tc.marginOver {
				t.Fatalf("margin ±%.1f %%, want at least ±%.1f %%", 100*c.Margin, 100*tc.marginOver)
			}
			if again := percentileCall(tc.candidate, tc.base, 99, 1.03); again != c {
				t.Fatalf("the same cycles called twice: %+v, then %+v", c, again)
			}
		})
	}
	small := percentileCall(cycles(rng, 200, mid, sd), cycles(rng, 200, mid, sd), 99, 1.03)
	large := percentileCall(cycles(rng, 20000, mid, sd), cycles(rng, 20000, mid, sd), 99, 1.03)
	if !(large.Margin < small.Margin/3) {
		t.Fatalf("margin at 20,000 cycles ±%.2f %%, at 200 ±%.2f %%: want it at least three times narrower", 100*large.Margin, 100*small.Margin)
	}
}

// Counting the draws finds the percentile sorting them would.
func TestADrawnPercentileIsThePercentileOfTheDraw(t *testing.T) {
	for _, n := range []int{1, 2, 7, 100, 201} {
		for _, q := range []int{50, 95, 99, 100} {
			sorted := cycles(rand.New(rand.NewSource(int64(n))), n, time.Second, 0.3).sorted()
			counts := make([]int, n)
			counted, drawn := randv2.New(randv2.NewPCG(uint64(n), uint64(q))), randv2.New(randv2.NewPCG(uint64(n), uint64(q)))
			for range 50 {
				got := drawnPercentile(sorted, counts, counted, q)
				var draw sample
				for range n {
					draw = append(draw, sorted[drawn.IntN(n)])
				}
				if want := draw.percentile(q); got != want {
					t.Fatalf("n=%d p%d: counted %v, the sorted draw's %v", n, q, got, want)
				}
			}
			if slices.ContainsFunc(counts, func(c int) bool { return c != 0 }) {
				t.Fatalf("n=%d p%d: counts left %v, want zeros", n, q, counts)
			}
		}
	}
}

// The control of an overhead run, a second go-cni, shows how far a ratio
// of medians moves when nothing differs: a ratio no farther from its
// target than the control is from 1 is not told apart, even where the
// pairs' spread is narrow.
func TestAnOverheadRatioIsNotToldApartWithinTheControlsOwnDeviation(t *testing.T) {
	rng := rand.New(rand.NewSource(3))
	const mid, sd = 300 * time.Millisecond, 0.02
	scaled := func(s sample, f float64) sample {
		out := make(sample, len(s))
		for i, d := range s {
			out[i] = time.Duration(float64(d) * f)
		}
		return out
	}
	direct := cycles(rng, 200, mid, sd)
	cases := []struct {
		name    string
		lib     sample
		control sample
		want    string
	}{
		{"8 % over go-cni, the control 1 % off: missed", scaled(cycles(rng, 200, mid, sd), 1.08), scaled(cycles(rng, 200, mid, sd), 1.01), "**missed**"},
		{"8 % over go-cni, the control 8 % off: not measurable", scaled(cycles(rng, 200, mid, sd), 1.08), scaled(cycles(rng, 200, mid, sd), 1.08), "not measurable at ±8."},
		{"3 % under go-cni, the control 8 % under: not measurable", scaled(cycles(rng, 200, mid, sd), 0.97), scaled(cycles(rng, 200, mid, sd), 0.92), "not measurable"},
		{"20 % under go-cni, the control 8 % off: met", scaled(cycles(rng, 200, mid, sd), 0.8), scaled(cycles(rng, 200, mid, sd), 1.08), "met"},
		{"8 % over go-cni, no control: missed", scaled(cycles(rng, 200, mid, sd), 1.08), nil, "**missed**"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := overheadResult{Lib: tc.lib, Direct: direct, Control: tc.control}
			if got := o.call().verdict(); !strings.HasPrefix(got, tc.want) {
				t.Fatalf("ratio %.3f: verdict %q, want %q", o.call().Q, got, tc.want)
			}
		})
	}
}

// A p99 against a fixed ceiling is judged at the noise of its own
// cycles: far under or over it is told, near it is not.
func TestAP99AgainstACeilingIsJudgedAtItsBootstrapNoise(t *testing.T) {
	rng := rand.New(rand.NewSource(11))
	own := cycles(rng, 200, 5*time.Millisecond, 0.8) // p99 about 30 ms
	p99 := own.percentile(99)
	for _, tc := range []struct {
		name    string
		ceiling time.Duration
		want    string
	}{
		{"a ceiling three times the p99: met", 3 * p99, "met"},
		{"a ceiling a third of the p99: missed", p99 / 3, "**missed**"},
		{"a ceiling at the p99: not measurable", p99, "not measurable: its 95 % interval"},
		{"a ceiling 20 % over the p99, within the interval's reach up: not measurable", 6 * p99 / 5, "not measurable"},
		{"a ceiling 20 % under the p99, beyond its reach down: missed", 4 * p99 / 5, "**missed**"},
		{"too few cycles for a p99: not measurable", 0, "not measurable (50 cycles"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, ceiling := own, tc.ceiling
			if ceiling == 0 {
				s, ceiling = own[:50], 3*p99
			}
			if got := percentileAgainst(s, 99, ceiling).verdict(); !strings.HasPrefix(got, tc.want) {
				t.Fatalf("p99 %v against %v: verdict %q, want %q", s.percentile(99), ceiling, got, tc.want)
			}
		})
	}
}
