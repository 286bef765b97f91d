package main

import (
	"fmt"
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
