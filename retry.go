package cninet

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	cni "github.com/containerd/go-cni"
	"github.com/containernetworking/cni/pkg/types"
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

func setupError(id, network string, attempts int, first, last, ctxErr error) error {
	what := fmt.Sprintf("%d attempt(s)", attempts)
	if ctxErr != nil {
		what += " (" + ctxErr.Error() + ")"
	}
	if attempts == 1 || first == last {
		return fmt.Errorf("%w: allocation %s in network %q after %s: %w", ErrSetupFailed, id, network, what, errors.Join(last, ctxErr))
	}
	return fmt.Errorf("%w: allocation %s in network %q after %s: first error: %v; last error: %w",
		ErrSetupFailed, id, network, what, first, errors.Join(last, ctxErr))
}

// isPermanent reports errors that no retry can fix: a missing plugin, an
// invalid config, or a CNI error code the spec reserves for those.
func isPermanent(err error) bool {
	if cni.IsInvalidConfig(err) || errors.Is(err, ErrInvalidConfig) || errors.Is(err, ErrPluginMissing) {
		return true
	}
	var cniErr *types.Error
	if errors.As(err, &cniErr) {
		switch cniErr.Code {
		case types.ErrIncompatibleCNIVersion, types.ErrUnsupportedField, types.ErrInvalidEnvironmentVariables,
			types.ErrDecodingFailure, types.ErrInvalidNetworkConfig:
			return true
		}
	}
	return strings.Contains(err.Error(), "failed to find plugin")
}
