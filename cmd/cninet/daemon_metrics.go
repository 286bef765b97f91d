package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/seed1280861d/cninet/internal/thick"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// daemonMetrics are cninet's OpenTelemetry meters and the daemon's own
// request meters, exported in the Prometheus format from a registry of
// their own.
type daemonMetrics struct {
	registry *prometheus.Registry
	provider metric.MeterProvider
	requests metric.Int64Counter
	duration metric.Float64Histogram
}

func newDaemonMetrics() (*daemonMetrics, error) {
	reg := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	meter := provider.Meter("github.com/seed1280861d/cninet/cmd/cninet/daemon")
	m := &daemonMetrics{registry: reg, provider: provider}
	if m.requests, err = meter.Int64Counter("cninet.daemon.requests",
		metric.WithDescription("CNI requests the daemon served, by command and result (ok or the CNI error code)")); err != nil {
		return nil, err
	}
	if m.duration, err = meter.Float64Histogram("cninet.daemon.request.duration", metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
		metric.WithDescription("how long the daemon took per CNI request, queueing included")); err != nil {
		return nil, err
	}
	return m, nil
}

// observe records one request.
func (m *daemonMetrics) observe(command, result string, d time.Duration) {
	attrs := metric.WithAttributes(attribute.String("command", command), attribute.String("result", result))
	m.requests.Add(context.Background(), 1, attrs)
	m.duration.Record(context.Background(), d.Seconds(), attrs)
}

// serve serves /metrics, /healthz and /readyz on addr.
func (m *daemonMetrics) serve(addr string, srv *thick.Server) (*http.Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", thick.Healthz)
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !srv.Ready() {
			http.Error(w, "not ready: draining", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	})
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(l)
	return hs, nil
}
