package integration

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// The namespace goes first, then Teardown: the plugins' DEL leaves the
// masquerade behind (both backends), the force cleanup removes it, and
// cninet.cleanup.removed says so by kind and backend; go-cni's own spans
// nest under cninet's.
func TestTelemetryCountsWhatCleanupRemovedAfterTheNamespaceWasDeleted(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		spans, reader := tracetest.NewSpanRecorder(), sdkmetric.NewManualReader()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
		mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
		otel.SetTracerProvider(tp) // go-cni's spans use the global provider
		t.Cleanup(func() { otel.SetTracerProvider(tracenoop.NewTracerProvider()) })

		nw := newNetwork(t, set, false)
		base := baseline(t)
		c, err := cninet.New(cninet.Config{
			Logger:   hclog.New(&hclog.LoggerOptions{Name: "cninet", Level: hclog.Warn, Output: testWriter{t}}),
			ConfList: nw.conf, PluginDirs: []string{set.Dir}, TracerProvider: tp, MeterProvider: mp,
		})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		w := netsandbox.NewWorkload(t)
		alloc := &cninet.Allocation{ID: "otel-1", Ports: []cninet.Port{{Label: "http", Value: 28090, To: 8080}}}
		if _, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
			t.Fatal(err)
		}
		if err := w.Delete(); err != nil {
			t.Fatal(err)
		}
		if err := c.Teardown(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
			t.Fatal(err)
		}
		assertNoLeaks(t, base, nw.allowance())

		backend := "iptables"
		if set.Backend == cninet.BackendNFTables {
			backend = "nftables"
		}
		removed := cleanupRemoved(t, reader, nw.cfg.NetworkName)
		t.Logf("cninet.cleanup.removed after Teardown: %v", removed)
		if removed[backend+" rule"] == 0 {
			t.Errorf("cninet.cleanup.removed by backend and kind %v: want the %s masquerade rule the DEL left", removed, backend)
		}
		if backend == "iptables" && removed["iptables chain"] == 0 {
			t.Errorf("cninet.cleanup.removed %v: want the masquerade chain the DEL left", removed)
		}
		ended := byName(spans.Ended())
		cleanup := ended["cninet.cleanup"]
		if cleanup == nil || spanAttr(cleanup, "cninet.removed") == "" || spanAttr(cleanup, "cninet.removed") == "0" {
			t.Errorf("the cleanup span does not say what it removed: %v", cleanup)
		}
		if td := ended["cninet.Teardown"]; td == nil || spanAttr(td, "cni.id") != "otel-1" || spanAttr(td, "cni.path") != w.Path {
			t.Errorf("Teardown span missing or without the allocation id and namespace")
		}
		if setup, add := ended["cni.Setup"], ended["cninet.add"]; setup == nil || add == nil || setup.Parent().SpanID() != add.SpanContext().SpanID() {
			t.Errorf("go-cni's cni.Setup span is not a child of cninet.add")
		}
	})
}

// cleanupRemoved sums cninet.cleanup.removed after a Teardown in network
// by "<backend> <kind>".
func cleanupRemoved(t *testing.T, reader *sdkmetric.ManualReader, network string) map[string]int64 {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != "cninet.cleanup.removed" || !ok {
				continue
			}
			for _, p := range sum.DataPoints {
				op, _ := p.Attributes.Value("cninet.operation")
				net, _ := p.Attributes.Value("cni.name")
				if op.AsString() != "teardown" || net.AsString() != network {
					continue
				}
				backend, _ := p.Attributes.Value("cninet.backend")
				kind, _ := p.Attributes.Value("cninet.kind")
				out[backend.AsString()+" "+kind.AsString()] += p.Value
			}
		}
	}
	return out
}

// byName indexes spans by name; the last of a name wins.
func byName(spans []sdktrace.ReadOnlySpan) map[string]sdktrace.ReadOnlySpan {
	out := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spans {
		out[s.Name()] = s
	}
	return out
}

func spanAttr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if kv.Key == attribute.Key(key) {
			if kv.Value.Type() == attribute.INT64 {
				return strconv.FormatInt(kv.Value.AsInt64(), 10)
			}
			return kv.Value.Emit()
		}
	}
	return ""
}
