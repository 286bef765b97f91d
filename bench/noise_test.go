package main

import (
	"math"
	"math/rand"
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
