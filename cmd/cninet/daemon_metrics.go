package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/seed1280861d/cninet/internal/thick"
	"go.opentelemetry.io/otel/attribute"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
)

// daemonMetrics are cninet's OpenTelemetry meters and the daemon's own
// request meters, exported in the Prometheus format from a registry of
// their own, beside the daemon process's runtime and process metrics
// (runtimeCollectors).
type daemonMetrics struct {
	registry  *prometheus.Registry
	provider  metric.MeterProvider
	requests  metric.Int64Counter
	duration  metric.Float64Histogram
	inFlight  metric.Int64UpDownCounter
	queued    metric.Int64UpDownCounter
	queueWait metric.Float64Histogram
}

// serviceName names the daemon in its telemetry's resource (service.name).
const serviceName = "cninet-daemon"

func newDaemonMetrics() (*daemonMetrics, error) {
	reg := prometheus.NewRegistry()
	for _, c := range runtimeCollectors() {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("runtime metrics: %w", err)
		}
	}
	exporter, err := otelprom.New(otelprom.WithRegisterer(reg))
	if err != nil {
		return nil, fmt.Errorf("prometheus exporter: %w", err)
	}
	// service.name is set, not merged from the environment, so that
	// every daemon's telemetry says what it is.
	res := resource.NewSchemaless(attribute.String("service.name", serviceName))
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter), sdkmetric.WithResource(res))
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
	if m.inFlight, err = meter.Int64UpDownCounter("cninet.daemon.requests.in_flight",
		metric.WithDescription("CNI requests running now (holding a slot), by command")); err != nil {
		return nil, err
	}
	if m.queued, err = meter.Int64UpDownCounter("cninet.daemon.queue.depth",
		metric.WithDescription("CNI requests waiting for a slot now, by pool (requests: ADD, DEL, GC; probes: STATUS, CHECK)")); err != nil {
		return nil, err
	}
	if m.queueWait, err = meter.Float64Histogram("cninet.daemon.queue.wait", metric.WithUnit("s"),
		metric.WithExplicitBucketBoundaries(0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30, 60, 120),
		metric.WithDescription("how long CNI requests waited for a slot, by pool")); err != nil {
		return nil, err
	}
	return m, nil
}

// runtimeCollectors are the daemon process's own health, under the names
// Prometheus' Go and process collectors give them everywhere, so that
// stock dashboards and alerts apply: go_goroutines, go_threads,
// go_memstats_* (heap in use, allocations), go_gc_duration_seconds (its
// count is the GC cycles), process_resident_memory_bytes,
// process_open_fds against process_max_fds, process_cpu_seconds_total
// and process_start_time_seconds (from /proc/self). Only the daemon
// registers them: the library's telemetry stays the embedding program's.
func runtimeCollectors() []prometheus.Collector {
	return []prometheus.Collector{
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	}
}

// InFlight, Queued and Waited make daemonMetrics the server's thick.Gauges.
func (m *daemonMetrics) InFlight(command string, delta int64) {
	m.inFlight.Add(context.Background(), delta, metric.WithAttributes(attribute.String("command", command)))
}

func (m *daemonMetrics) Queued(pool string, delta int64) {
	m.queued.Add(context.Background(), delta, metric.WithAttributes(attribute.String("pool", pool)))
}

func (m *daemonMetrics) Waited(pool string, d time.Duration) {
	m.queueWait.Record(context.Background(), d.Seconds(), metric.WithAttributes(attribute.String("pool", pool)))
}

// observe records one request.
func (m *daemonMetrics) observe(command, result string, d time.Duration) {
	attrs := metric.WithAttributes(attribute.String("command", command), attribute.String("result", result))
	m.requests.Add(context.Background(), 1, attrs)
	m.duration.Record(context.Background(), d.Seconds(), attrs)
}

// serve serves /metrics, /healthz and /readyz on addr; delegatesReady is
// the delegates' readiness /readyz reports (the daemon's ReadinessCache).
func (m *daemonMetrics) serve(addr string, srv *thick.Server, delegatesReady func(context.Context) error) (*http.Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics-listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m.handler())
	mux.HandleFunc("/healthz", thick.Healthz)
	mux.HandleFunc("/readyz", readyz(srv.Ready, delegatesReady))
	hs := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go hs.Serve(l)
	return hs, nil
}

// handler serves the registry in the Prometheus text format.
func (m *daemonMetrics) handler() http.Handler {
	return promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{})
}

// readyzTimeout bounds each run of the delegates' STATUS behind /readyz,
// and one probe's wait for it.
const readyzTimeout = 10 * time.Second

// readyz answers 200 "ready" while the server takes requests and every
// delegate network's STATUS passes; 503 naming why otherwise (draining,
// no conflist yet, a network's STATUS failed). Serving is looked at on
// every probe; the delegates' verdict may be a cached one
// (thick.ReadinessCache). /healthz stays liveness: the process serves.
func readyz(serving func() bool, delegatesReady func(context.Context) error) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if !serving() {
			http.Error(w, "not ready: not serving (starting or draining)", http.StatusServiceUnavailable)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), readyzTimeout)
		defer cancel()
		if err := delegatesReady(ctx); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ready")
	}
}
