package thick

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/seed1280861d/cninet"
)

func TestErrorFor(t *testing.T) {
	plugin := &types.Error{Code: 123, Msg: "bridge says no", Details: "d"}
	cases := []struct {
		name     string
		err      error
		wantCode uint
		wantMsg  string // "" : the error's own text
	}{
		{"a delegate plugin's error keeps its code and message through cninet's wrapping",
			fmt.Errorf("%w: allocation a: %w", cninet.ErrSetupFailed, plugin), 123, "bridge says no"},
		{"an unknown network is an invalid network config", fmt.Errorf("%w: no network", cninet.ErrNetworkNotFound), types.ErrInvalidNetworkConfig, ""},
		{"a missing plugin is an invalid network config", fmt.Errorf("%w: bridge", cninet.ErrPluginMissing), types.ErrInvalidNetworkConfig, ""},
		{"a missing netns is an invalid environment", fmt.Errorf("%w: %w: gone", cninet.ErrInvalidArgument, cninet.ErrNoNetNS), types.ErrInvalidEnvironmentVariables, ""},
		{"not ready is plugin not available", fmt.Errorf("%w: bridge missing", cninet.ErrNotReady), types.ErrPluginNotAvailable, ""},
		{"a busy daemon is try again later", fmt.Errorf("%w: draining", ErrBusy), types.ErrTryAgainLater, ""},
		{"a deadline is try again later", context.DeadlineExceeded, types.ErrTryAgainLater, ""},
		{"an existing attachment has its own code", fmt.Errorf("%w: eth0", cninet.ErrAlreadyAttached), CodeAlreadyAttached, ""},
		{"an unhealthy attachment has its own code", fmt.Errorf("%w: x", cninet.ErrCheckFailed), CodeCheckFailed, ""},
		{"an incomplete cleanup has its own code", fmt.Errorf("%w: x", cninet.ErrCleanupFailed), CodeCleanupFailed, ""},
		{"an unreadable record has its own code, whatever else the error says", fmt.Errorf("%w: %w: x", cninet.ErrCleanupFailed, cninet.ErrRecordUnreadable), CodeRecordUnreadable, ""},
		{"anything else is internal", errors.New("surprise"), types.ErrInternal, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ErrorFor(tc.err)
			want := tc.wantMsg
			if want == "" {
				want = tc.err.Error()
			}
			if got.Code != tc.wantCode || got.Msg != want {
				t.Fatalf("got code %d msg %q, want %d %q", got.Code, got.Msg, tc.wantCode, want)
			}
		})
	}
	if ErrorFor(nil) != nil {
		t.Fatal("ErrorFor(nil) is not nil")
	}
}
