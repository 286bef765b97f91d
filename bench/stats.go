package main

import (
	"fmt"
	"math"
	"sort"
	"time"
)

// sample is a set of durations of one contender.
type sample []time.Duration

func (s sample) sorted() sample {
	c := append(sample(nil), s...)
	sort.Slice(c, func(i, j int) bool { return c[i] < c[j] })
	return c
}

func (s sample) median() time.Duration {
	if len(s) == 0 {
		return 0
	}
	c := s.sorted()
	if len(c)%2 == 1 {
		return c[len(c)/2]
	}
	return (c[len(c)/2-1] + c[len(c)/2]) / 2
}

// p95 is the nearest-rank 95th percentile.
func (s sample) p95() time.Duration {
	if len(s) == 0 {
		return 0
	}
	c := s.sorted()
	i := (len(c)*95+99)/100 - 1
	return c[max(i, 0)]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d.Microseconds())/1000) }

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// pairedRatio is the median of a[i]/b[i]: cycles i of the two contenders
// ran next to each other.
func pairedRatio(a, b sample) float64 {
	var qs []float64
	for i := range min(len(a), len(b)) {
		qs = append(qs, ratio(a[i], b[i]))
	}
	if len(qs) == 0 {
		return 0
	}
	sort.Float64s(qs)
	if len(qs)%2 == 1 {
		return qs[len(qs)/2]
	}
	return (qs[len(qs)/2-1] + qs[len(qs)/2]) / 2
}

// pairedDiff is the mean of a[i]−b[i] over the cycles i that ran in the
// same round, and its standard error: how far the mean difference is
// from zero in units of the noise of the pairs.
func pairedDiff(a, b sample) (mean, stdErr time.Duration, n int) {
	n = min(len(a), len(b))
	if n == 0 {
		return 0, 0, 0
	}
	var sum float64
	for i := range n {
		sum += float64(a[i] - b[i])
	}
	m := sum / float64(n)
	if n < 2 {
		return time.Duration(m), 0, n
	}
	var sq float64
	for i := range n {
		d := float64(a[i]-b[i]) - m
		sq += d * d
	}
	return time.Duration(m), time.Duration(math.Sqrt(sq/float64(n-1)) / math.Sqrt(float64(n))), n
}

// pairedString is pairedDiff as "+5.1 ± 3.2 ms", or a dash without pairs.
func pairedString(a, b sample) string {
	m, se, n := pairedDiff(a, b)
	if n == 0 {
		return "–"
	}
	return fmt.Sprintf("%+.1f ± %.1f ms", float64(m.Microseconds())/1000, float64(se.Microseconds())/1000)
}
