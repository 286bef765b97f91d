package telemetry

import (
	"context"
	"errors"
	"testing"

	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
)

func TestTheGaugesObserveWhatTheRootCountsAndStatusSaid(t *testing.T) {
	reader := sdkmetric.NewManualReader()
	known := 2
	tel, err := New(Options{MeterProvider: sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)), Networks: func() int { return known }})
	if err != nil {
		t.Fatal(err)
	}
	defer tel.Close()
	tel.NoteReady("nomad", nil)
	tel.NoteReady("other", errors.New("plugin missing"))
	known = 3 // observed at collection, not at New
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			g, ok := m.Data.(metricdata.Gauge[int64])
			if !ok {
				continue
			}
			for _, p := range g.DataPoints {
				network, _ := p.Attributes.Value(attribute.Key("cni.name"))
				got[m.Name+" "+network.AsString()] = p.Value
			}
		}
	}
	want := map[string]int64{"cninet.networks ": 3, "cninet.network.ready nomad": 1, "cninet.network.ready other": 0}
	if len(got) != len(want) {
		t.Errorf("gauges %v, want %v", got, want)
	}
	for k, v := range want {
		if n, ok := got[k]; !ok || n != v {
			t.Errorf("%s = %d (observed %v), want %d", k, n, ok, v)
		}
	}
}
