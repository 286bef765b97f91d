package cninet

import (
	"context"
	"errors"
	"fmt"
	"testing"
)

func TestErrorTypeNamesTheMostSpecificSentinel(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"no error has none", nil, ""},
		{"a Setup that ran out of time", fmt.Errorf("%w: after 2 attempt(s): %w", ErrSetupFailed, context.DeadlineExceeded), "timeout"},
		{"a Setup whose plugin failed", fmt.Errorf("%w: plugin said no", ErrSetupFailed), "setup_failed"},
		{"a Status that misses a plugin", fmt.Errorf("%w: %w: bridge", ErrNotReady, ErrPluginMissing), "plugin_missing"},
		{"a cleanup without iptables", fmt.Errorf("%w: %w", ErrCleanupFailed, ErrIPTablesMissing), "iptables_missing"},
		{"a plugin's own error", errors.New("bridge: device busy"), "_OTHER"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := errorType(tc.err); got != tc.want {
				t.Errorf("errorType = %q, want %q", got, tc.want)
			}
		})
	}
}
