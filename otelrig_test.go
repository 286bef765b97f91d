package cninet_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// otelRig is the OpenTelemetry SDK with an in-memory span recorder and a
// manual metric reader, wired into a Configurator's Config.
type otelRig struct {
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	tp     *sdktrace.TracerProvider
	mp     *sdkmetric.MeterProvider
}

func newOtelRig(t *testing.T) otelRig {
	t.Helper()
	r := otelRig{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	r.tp = sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(r.spans))
	r.mp = sdkmetric.NewMeterProvider(sdkmetric.WithReader(r.reader))
	t.Cleanup(func() {
		_ = r.tp.Shutdown(context.Background())
		_ = r.mp.Shutdown(context.Background())
	})
	return r
}

// named returns the ended spans called name, in the order they ended.
func (r otelRig) named(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range r.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// one returns the only ended span called name.
func (r otelRig) one(t *testing.T, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	spans := r.named(name)
	if len(spans) != 1 {
		t.Fatalf("%d spans %q ended, want 1; all: %s", len(spans), name, r.tree())
	}
	return spans[0]
}

// tree lists the ended spans as "parent > child" names, for failure messages.
func (r otelRig) tree() string {
	byID := map[string]string{}
	for _, s := range r.spans.Ended() {
		byID[s.SpanContext().SpanID().String()] = s.Name()
	}
	var lines []string
	for _, s := range r.spans.Ended() {
		lines = append(lines, byID[s.Parent().SpanID().String()]+" > "+s.Name())
	}
	sort.Strings(lines)
	return strings.Join(lines, "; ")
}

// childOf fails unless child's parent is parent.
func childOf(t *testing.T, child, parent sdktrace.ReadOnlySpan) {
	t.Helper()
	if child.Parent().SpanID() != parent.SpanContext().SpanID() {
		t.Errorf("span %q is not a child of %q", child.Name(), parent.Name())
	}
}

// attr returns the span's attribute key, as a string ("" when absent).
func attr(s sdktrace.ReadOnlySpan, key string) string {
	for _, kv := range s.Attributes() {
		if string(kv.Key) == key {
			return kv.Value.Emit()
		}
	}
	return ""
}

// wantAttrs fails unless the span carries each attribute with the value.
func wantAttrs(t *testing.T, s sdktrace.ReadOnlySpan, want map[string]string) {
	t.Helper()
	for k, v := range want {
		if got := attr(s, k); got != v {
			t.Errorf("span %q: %s = %q, want %q", s.Name(), k, got, v)
		}
	}
}

// collect reads every metric now.
func (r otelRig) collect(t *testing.T) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := r.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := map[string]metricdata.Aggregation{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// matches reports whether set has every attribute of want.
func matches(set attribute.Set, want map[string]string) bool {
	for k, v := range want {
		if got, ok := set.Value(attribute.Key(k)); !ok || got.Emit() != v {
			return false
		}
	}
	return true
}

// sum adds up the int64 counter or gauge points of metric name whose
// attributes include want.
func (r otelRig) sum(t *testing.T, name string, want map[string]string) int64 {
	t.Helper()
	var total int64
	switch data := r.collect(t)[name].(type) {
	case metricdata.Sum[int64]:
		for _, p := range data.DataPoints {
			if matches(p.Attributes, want) {
				total += p.Value
			}
		}
	case metricdata.Gauge[int64]:
		for _, p := range data.DataPoints {
			if matches(p.Attributes, want) {
				total += p.Value
			}
		}
	case nil:
	default:
		t.Fatalf("metric %s is a %T", name, data)
	}
	return total
}

// count is how many values histogram name recorded with attributes
// including want.
func (r otelRig) count(t *testing.T, name string, want map[string]string) uint64 {
	t.Helper()
	var n uint64
	if data, ok := r.collect(t)[name].(metricdata.Histogram[float64]); ok {
		for _, p := range data.DataPoints {
			if matches(p.Attributes, want) {
				n += p.Count
			}
		}
	}
	return n
}

// points lists the int64 sum points of name as "attrs=value", sorted,
// for comparing whole breakdowns.
func (r otelRig) points(t *testing.T, name string, keys ...string) []string {
	t.Helper()
	data, _ := r.collect(t)[name].(metricdata.Sum[int64])
	var out []string
	for _, p := range data.DataPoints {
		var parts []string
		for _, k := range keys {
			v, _ := p.Attributes.Value(attribute.Key(k))
			parts = append(parts, v.Emit())
		}
		out = append(out, fmt.Sprintf("%s=%d", strings.Join(parts, "/"), p.Value))
	}
	sort.Strings(out)
	return out
}

// telFixture is a cleanup fixture (fake plugins, iptables and nftables,
// reservations in a temporary directory) whose Configurator reports to an
// otelRig.
type telFixture struct {
	cleanupFixture
	rig otelRig
	nft *fakes.NFTables
}

func newTelFixture(t *testing.T, fake *fakes.CNI, retry cninet.RetryPolicy) telFixture {
	t.Helper()
	dataDir := t.TempDir()
	cfg := cninet.DefaultBridgeConfig()
	cfg.NetworkName, cfg.IPv4Subnet, cfg.IPv6Subnet, cfg.IPAMDataDir = "nomad", "198.18.0.0/24", "fd00:198:18::/64", dataDir
	conf, err := cninet.BridgeConfList(cfg)
	if err != nil {
		t.Fatal(err)
	}
	f := telFixture{rig: newOtelRig(t), nft: &fakes.NFTables{}}
	f.fixture = fixture{cni: fake, v4: fakes.NewIPTables().Load("nat", sharedNat).Load("filter", sharedFilter),
		v6: fakes.NewIPTables().Load("nat", sharedNat).Load("filter", sharedFilter)}
	f.network, f.ipamDir = "nomad", filepath.Join(dataDir, "nomad")
	if err := os.MkdirAll(f.ipamDir, 0o755); err != nil {
		t.Fatal(err)
	}
	f.c, err = cninet.New(cninet.Config{
		ConfList: conf, CNI: fake, CacheDir: t.TempDir(), StateDir: t.TempDir(), PluginDirs: []string{t.TempDir()}, Retry: retry,
		NFTables: func() (host.NFTables, error) { return f.nft, nil },
		IPTables: func(v6 bool) (host.IPTables, error) {
			if v6 {
				return f.v6, nil
			}
			return f.v4, nil
		},
		TracerProvider: f.rig.tp, MeterProvider: f.rig.mp,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.c.Close() })
	return f
}
