package cninet_test

import (
	"testing"
	"time"

	"github.com/seed1280861d/cninet"
)

func TestRetryDelayIsJitteredExponentialBackoffCappedAtMaxDelay(t *testing.T) {
	p := cninet.RetryPolicy{Attempts: 10, BaseDelay: 100 * time.Millisecond, MaxDelay: time.Second}
	cases := []struct {
		retry    int
		min, max time.Duration
	}{
		{1, 50 * time.Millisecond, 100 * time.Millisecond},
		{2, 100 * time.Millisecond, 200 * time.Millisecond},
		{3, 200 * time.Millisecond, 400 * time.Millisecond},
		{5, 500 * time.Millisecond, time.Second}, // 1.6 s capped at 1 s
		{100, 500 * time.Millisecond, time.Second},
	}
	for _, tc := range cases {
		seen := map[time.Duration]bool{}
		for i := 0; i < 200; i++ {
			d := p.Delay(tc.retry)
			if d < tc.min || d > tc.max {
				t.Fatalf("Delay(%d) = %s, want within [%s, %s]", tc.retry, d, tc.min, tc.max)
			}
			seen[d] = true
		}
		if len(seen) < 10 {
			t.Errorf("Delay(%d) took only %d distinct values in 200 draws: not jittered", tc.retry, len(seen))
		}
	}
}

func TestZeroRetryPolicyMeansDefault(t *testing.T) {
	if cninet.DefaultRetryPolicy.Attempts != 3 {
		t.Fatalf("DefaultRetryPolicy.Attempts = %d, want 3", cninet.DefaultRetryPolicy.Attempts)
	}
	for i := 0; i < 100; i++ {
		if d := (cninet.RetryPolicy{}).Delay(1); d >= 500*time.Millisecond || d < cninet.DefaultRetryPolicy.BaseDelay/2 {
			t.Fatalf("zero policy's first retry waits %s: want the default's, well under 1s", d)
		}
	}
}
