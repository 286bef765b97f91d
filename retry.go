package cninet

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"
)

// RetryPolicy says how often and how patiently Setup retries a failed ADD.
//
// The wait before retry n (n ≥ 1) is drawn uniformly from [d/2, d] where
// d = min(BaseDelay·2^(n-1), MaxDelay): exponential so that a persistent
// failure does not hammer the plugins, jittered so that workloads that failed
// together (the bridge-creation race) do not retry together.
//
// The zero value means DefaultRetryPolicy.
type RetryPolicy struct {
	// Attempts is the total number of ADD attempts, the first included.
	// 1 disables retrying; 0 means DefaultRetryPolicy.Attempts.
	Attempts int
	// BaseDelay is the wait before the first retry; 0 means
	// DefaultRetryPolicy.BaseDelay.
	BaseDelay time.Duration
	// MaxDelay caps every wait; 0 means DefaultRetryPolicy.MaxDelay.
	MaxDelay time.Duration
}

// DefaultRetryPolicy is used for the zero RetryPolicy: three attempts, the
// first retry after 50–100 ms, the second after 100–200 ms. The bridge
// plugin's creation race resolves in milliseconds, so waiting a whole second
// (as fixed-delay loops do) only delays the workload.
var DefaultRetryPolicy = RetryPolicy{
	Attempts:  3,
	BaseDelay: 100 * time.Millisecond,
	MaxDelay:  2 * time.Second,
}

// validate reports a policy no caller could mean, instead of silently
// "fixing" it.
func (p RetryPolicy) validate() error {
	switch {
	case p.Attempts < 0:
		return fmt.Errorf("%w: retry attempts %d, want 0 (default) or more", ErrInvalidConfig, p.Attempts)
	case p.BaseDelay < 0 || p.MaxDelay < 0:
		return fmt.Errorf("%w: retry delays must not be negative (base %s, max %s)", ErrInvalidConfig, p.BaseDelay, p.MaxDelay)
	case p.MaxDelay > 0 && p.BaseDelay > p.MaxDelay:
		return fmt.Errorf("%w: retry base delay %s exceeds max delay %s", ErrInvalidConfig, p.BaseDelay, p.MaxDelay)
	}
	return nil
}

// withDefaults fills each zero field from DefaultRetryPolicy.
func (p RetryPolicy) withDefaults() RetryPolicy {
	if p.Attempts == 0 {
		p.Attempts = DefaultRetryPolicy.Attempts
	}
	if p.BaseDelay == 0 {
		p.BaseDelay = DefaultRetryPolicy.BaseDelay
	}
	if p.MaxDelay == 0 {
		p.MaxDelay = max(DefaultRetryPolicy.MaxDelay, p.BaseDelay)
	}
	return p
}

// Delay returns the jittered wait before retry n (1 for the first retry).
// Zero fields take their DefaultRetryPolicy values.
func (p RetryPolicy) Delay(n int) time.Duration {
	p = p.withDefaults()
	ceiling := p.MaxDelay
	if n < 1 {
		n = 1
	}
	if n <= 62 {
		if d := p.BaseDelay << (n - 1); d > 0 && d < ceiling {
			ceiling = d
		}
	}
	half := ceiling / 2
	return half + rand.N(ceiling-half+1)
}

// wait sleeps for Delay(n) or until ctx is done, whichever is first, and
// returns ctx's error in the latter case.
func (p RetryPolicy) wait(ctx context.Context, n int) error {
	t := time.NewTimer(p.Delay(n))
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
