package cninet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/seed1280861d/cninet/internal/footprint"
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

// What the sweep removed passes as it is (TestTelemetryOfGC counts it by
// backend through GC).
func TestGCItemsAreTheReportsItemsWithDetachedAttachmentsByCNI(t *testing.T) {
	report := &GCReport{}
	report.addCached(GCItem{Kind: GCCachedAttachment, ID: "dead-1", Network: "nomad", Detail: "eth0"})
	report.addCached(GCItem{Kind: GCRecordedAttachment, ID: "dead-2", Network: "nomad", Detail: "eth0"})
	want := []footprint.Item{
		{Kind: footprint.Kind(GCCachedAttachment), ID: "dead-1", Network: "nomad", Backend: "cni", Detail: "eth0"},
		{Kind: footprint.Kind(GCRecordedAttachment), ID: "dead-2", Network: "nomad", Backend: "cni", Detail: "eth0"},
	}
	if got := slices.Collect(gcItems(report)); !slices.Equal(got, want) {
		t.Errorf("gcItems:\n got %+v\nwant %+v", got, want)
	}
	for it := range report.All() {
		if it.Backend == "cni" {
			t.Errorf("the report itself says backend cni for %+v: only telemetry counts it so", it)
		}
	}
}
