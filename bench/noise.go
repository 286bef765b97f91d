package main

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"time"
)

// A ratio of medians close to its target may be on either side of it by
// the machine's noise alone. The bench measures the noise with the
// control (a contender that differs from the baseline by nothing: a
// second go-cni) or, without one, with the pairs of candidate and
// baseline; it keeps measuring while the ratio is within the noise of
// its target, up to -noise-cap times the cycles asked for, and reports a
// ratio still within the noise then as not measurable at that spread:
// neither met nor missed.

// spread is the noise of a ratio between two contenders that differ by
// nothing, on the log scale: the robust standard deviation (1.4826 ×
// the median absolute deviation) of log(other_i / base_i) over the pairs
// of cycles that ran side by side, other being the control (a second
// baseline). Where a scenario has no control, other is the candidate:
// its pairs with the baseline vary by the noise and by whatever of the
// difference itself varies, so the noise is not underestimated.
func spread(base, other sample) float64 {
	var logs []float64
	for i := range min(len(base), len(other)) {
		if base[i] > 0 && other[i] > 0 {
			logs = append(logs, math.Log(float64(other[i])/float64(base[i])))
		}
	}
	return robustSD(logs)
}

func robustSD(xs []float64) float64 {
	if len(xs) < 2 {
		return math.Inf(1)
	}
	med := medianOf(xs)
	dev := make([]float64, len(xs))
	for i, x := range xs {
		dev[i] = math.Abs(x - med)
	}
	return 1.4826 * medianOf(dev)
}

func medianOf(xs []float64) float64 {
	c := append([]float64(nil), xs...)
	sort.Float64s(c)
	if len(c)%2 == 1 {
		return c[len(c)/2]
	}
	return (c[len(c)/2-1] + c[len(c)/2]) / 2
}

// medianSE is the standard error of a median of n normal values of
// standard deviation 1: √(π/2)/√n.
func medianSE(n int) float64 { return math.Sqrt(math.Pi/2) / math.Sqrt(float64(n)) }

// noiseMargin is the half-width, as a factor, within which a ratio of
// medians of n cycles each is the noise of its spread: two standard
// errors of the log ratio (about 95 %).
func noiseMargin(spread float64, n int) float64 {
	if n == 0 {
		return math.Inf(1)
	}
	return math.Exp(2*spread*medianSE(n)) - 1
}

// ratioCall is what a ratio of medians says of its target at the noise
// it was measured with.
type ratioCall struct {
	Q, Target float64
	// Margin is the noise's half-width at the cycles measured (0.012:
	// ±1.2 %).
	Margin float64
	// Below and Above, where a bootstrap measured them, are how far the
	// interval reaches under and over Q (0.1: 10 %), Margin the larger:
	// a ratio under its target is told when the interval's top stays
	// under it, one over it when the interval's bottom stays over it.
	Below, Above float64
	N            int
	// Of, when set, is what Q and its target are multiples of (a fixed
	// ceiling): the verdict then speaks in its unit.
	Of time.Duration
}

// callRatio judges candidate / base against target at noise (a
// spread).
func callRatio(candidate, base sample, noise, target float64) ratioCall {
	n := min(len(candidate), len(base))
	return ratioCall{Q: ratio(candidate.median(), base.median()), Target: target, Margin: noiseMargin(noise, n), N: n}
}

// told says whether the ratio is told apart from its target.
func (c ratioCall) told() bool {
	reach := c.Margin
	if c.Below > 0 || c.Above > 0 {
		reach = c.Above
		if c.Q > c.Target {
			reach = c.Below
		}
	}
	return math.Abs(math.Log(c.Q/c.Target)) > math.Log1p(reach)
}

// verdict is met, missed, or not measurable at the margin.
func (c ratioCall) verdict() string {
	if math.IsInf(c.Margin, 1) {
		return fmt.Sprintf("not measurable (%d cycles: too few to measure its noise)", c.N)
	}
	if !c.told() && (c.Below > 0 || c.Above > 0) {
		lo, hi := c.Q/(1+c.Below), c.Q*(1+c.Above)
		if c.Of > 0 {
			at := func(f float64) time.Duration { return time.Duration(f * float64(c.Of)) }
			return fmt.Sprintf("not measurable: its 95 %% interval, %s to %s, holds %s (%d cycles)", ms(at(lo)), ms(at(hi)), ms(at(c.Target)), c.N)
		}
		return fmt.Sprintf("not measurable: its 95 %% interval, %.3f× to %.3f×, holds %.2f× (%d cycles)", lo, hi, c.Target, c.N)
	}
	if !c.told() {
		return fmt.Sprintf("not measurable at ±%.1f %% noise (%d cycles)", 100*c.Margin, c.N)
	}
	return verdict(c.Q <= c.Target)
}

// cyclesToTell is how many cycles a ratio q would need to be told apart
// from target at spread: (2 × √(π/2) × spread / |ln q − ln target|)².
func cyclesToTell(q, target, spread float64) int {
	d := math.Abs(math.Log(q / target))
	if d == 0 || math.IsInf(spread, 1) {
		return math.MaxInt32
	}
	n := math.Ceil(math.Pow(2*math.Sqrt(math.Pi/2)*spread/d, 2))
	return int(min(n, math.MaxInt32))
}

// moreCycles is how many cycles to run beyond done for a ratio q of
// target at spread: none when it is told apart already, else up to what
// would tell it, in steps of step, at most up to limit in all.
func moreCycles(q, target, spread float64, done, step, limit int) int {
	if done >= limit || math.Abs(math.Log(q/target)) > math.Log1p(noiseMargin(spread, done)) {
		return 0
	}
	need := cyclesToTell(q, target, spread) - done
	need = (max(need, 1) + step - 1) / step * step
	return min(need, limit-done)
}

// A ratio of p99s (the pressure scenario's target) has no control to
// measure its noise by, and an extreme percentile of a few hundred
// cycles moves far more between runs than a median does. Its noise is
// measured by the bootstrap: both contenders' cycles are drawn again,
// with replacement, as many times as bootstrapDraws, and the ratio of
// the drawn samples' percentiles spreads as the run's would.

// bootstrapDraws is how many resamples percentileCall takes: enough for
// the 2.5th and 97.5th percentiles of their ratios to move by well under
// a percent between two seeds.
const bootstrapDraws = 2000

// percentileCall judges the ratio of candidate's q-th percentile to
// base's against target. Its margin is the larger half of the 95 %
// bootstrap interval of that ratio, on the log scale; its N the smaller
// sample. The draws are seeded by a constant: the same cycles get the
// same call.
//
// A percentile that is a sample's slowest cycle (the p99 of fewer than
// 100) has no measurable noise: the bootstrap never draws beyond it, so
// its interval would be too narrow. Its margin is +Inf.
func percentileCall(candidate, base sample, q int, target float64) ratioCall {
	n := min(len(candidate), len(base))
	c := ratioCall{Q: ratio(candidate.percentile(q), base.percentile(q)), Target: target, Margin: math.Inf(1), N: n}
	if c.Q <= 0 || isSlowest(len(candidate), q) || isSlowest(len(base), q) {
		return c
	}
	sc, sb := candidate.sorted(), base.sorted()
	counts := make([]int, max(len(sc), len(sb)))
	return bootstrapped(c, func(rng *rand.Rand) float64 {
		return ratio(drawnPercentile(sc, counts, rng, q), drawnPercentile(sb, counts, rng, q))
	})
}

// percentileAgainst judges s's q-th percentile against a fixed ceiling as
// percentileCall judges a ratio: its Q is the percentile over ceiling,
// its target 1, its margin the larger half of the 95 % bootstrap
// interval of the percentile drawn from s alone.
func percentileAgainst(s sample, q int, ceiling time.Duration) ratioCall {
	c := ratioCall{Q: ratio(s.percentile(q), ceiling), Target: 1, Margin: math.Inf(1), N: len(s), Of: ceiling}
	if c.Q <= 0 || isSlowest(len(s), q) {
		return c
	}
	sorted := s.sorted()
	counts := make([]int, len(sorted))
	return bootstrapped(c, func(rng *rand.Rand) float64 {
		return ratio(drawnPercentile(sorted, counts, rng, q), ceiling)
	})
}

// bootstrapped is c with the reaches of the 95 % interval of
// bootstrapDraws values of draw (a draw of 0 or less counts as none),
// seeded by a constant: the same cycles get the same call. With fewer
// than half the draws giving a value, c is left as it is.
func bootstrapped(c ratioCall, draw func(*rand.Rand) float64) ratioCall {
	rng := rand.New(rand.NewPCG(1, 2))
	logs := make([]float64, 0, bootstrapDraws)
	for range bootstrapDraws {
		if v := draw(rng); v > 0 {
			logs = append(logs, math.Log(v))
		}
	}
	if len(logs) < bootstrapDraws/2 {
		return c
	}
	sort.Float64s(logs)
	lo, hi := logs[len(logs)*25/1000], logs[len(logs)*975/1000-1]
	c.Below, c.Above = reaches(math.Log(c.Q), lo, hi)
	c.Margin = max(c.Below, c.Above)
	return c
}

// drawnPercentile is the nearest-rank q-th percentile of len(sorted)
// cycles drawn from sorted with replacement. It counts how often each
// cycle is drawn rather than sorting the draw: the drawn percentile is
// the cycle at which the counts, in sorted's order, pass its rank.
// counts is scratch space of at least len(sorted) zeros, left zeroed.
func drawnPercentile(sorted sample, counts []int, rng *rand.Rand, q int) time.Duration {
	n := len(sorted)
	for range n {
		counts[rng.IntN(n)]++
	}
	rank, seen, at := (n*q+99)/100-1, 0, -1
	for i := range n {
		if seen += counts[i]; seen > rank && at < 0 {
			at = i
		}
		counts[i] = 0
	}
	return sorted[at]
}

// isSlowest says whether the nearest-rank q-th percentile of n cycles is
// their slowest.
func isSlowest(n, q int) bool { return (n*q+99)/100 >= n }

// reaches are how far, as factors, the interval [lo, hi] of log values
// reaches under and over mid (a tiny reach where it does not: a
// bootstrap that drew mid every time).
func reaches(mid, lo, hi float64) (below, above float64) {
	const least = 1e-9
	return max(math.Exp(mid-lo)-1, least), max(math.Exp(hi-mid)-1, least)
}
