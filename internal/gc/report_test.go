package gc

import (
	"slices"
	"testing"

	"github.com/seed1280861d/cninet/internal/footprint"
)

// What the sweep removed passes as it is (TestTelemetryOfGC counts it by
// backend through GC).
func TestGCItemsAreTheReportsItemsWithDetachedAttachmentsByCNI(t *testing.T) {
	report := &Report{}
	report.addDetached(footprint.Item{Kind: KindCachedAttachment, ID: "dead-1", Network: "nomad", Detail: "eth0"})
	report.addDetached(footprint.Item{Kind: KindRecordedAttachment, ID: "dead-2", Network: "nomad", Detail: "eth0"})
	want := []footprint.Item{
		{Kind: KindCachedAttachment, ID: "dead-1", Network: "nomad", Backend: "cni", Detail: "eth0"},
		{Kind: KindRecordedAttachment, ID: "dead-2", Network: "nomad", Backend: "cni", Detail: "eth0"},
	}
	if got := slices.Collect(report.items()); !slices.Equal(got, want) {
		t.Errorf("items:\n got %+v\nwant %+v", got, want)
	}
	for _, it := range report.Detached() {
		if it.Backend == "cni" {
			t.Errorf("the report itself says backend cni for %+v: only telemetry counts it so", it)
		}
	}
}
