package main

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
)

// scrape is the daemon's /metrics, parsed.
func scrape(t *testing.T, m *daemonMetrics) map[string]*dto.MetricFamily {
	t.Helper()
	rec := httptest.NewRecorder()
	m.handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	var parser expfmt.TextParser
	families, err := parser.TextToMetricFamilies(strings.NewReader(rec.Body.String()))
	if err != nil {
		t.Fatalf("/metrics is not the Prometheus text format: %v\n%s", err, rec.Body)
	}
	return families
}

// value is the value of family's only sample: a gauge's, a counter's, or
// a histogram's count.
func value(t *testing.T, families map[string]*dto.MetricFamily, family string) float64 {
	t.Helper()
	f, ok := families[family]
	if !ok || len(f.Metric) == 0 {
		t.Fatalf("/metrics has no %s", family)
	}
	s := f.Metric[0]
	switch {
	case s.Gauge != nil:
		return s.Gauge.GetValue()
	case s.Counter != nil:
		return s.Counter.GetValue()
	case s.Summary != nil:
		return float64(s.Summary.GetSampleCount())
	case s.Histogram != nil:
		return float64(s.Histogram.GetSampleCount())
	}
	return s.Untyped.GetValue()
}

// The daemon's /metrics carry its process's health beside cninet's
// meters: what an operator watches for a leak (goroutines, heap, file
// descriptors, memory) or a busy loop (CPU), under Prometheus' usual
// names.
func TestDaemonMetricsCarryTheProcesssHealth(t *testing.T) {
	m, err := newDaemonMetrics()
	if err != nil {
		t.Fatal(err)
	}
	families := scrape(t, m)
	above := []struct {
		family string
		min    float64
	}{
		{"go_goroutines", 1},
		{"go_threads", 1},
		{"go_memstats_heap_alloc_bytes", 1},
		{"go_memstats_heap_inuse_bytes", 1},
		{"process_resident_memory_bytes", 1 << 20},
		{"process_open_fds", 3},
		{"process_max_fds", 3},
		{"process_start_time_seconds", float64(time.Now().Add(-24 * time.Hour).Unix())},
	}
	for _, a := range above {
		if v := value(t, families, a.family); v < a.min {
			t.Errorf("%s = %v, want at least %v", a.family, v, a.min)
		}
	}
	// The GC count and the CPU time may be zero in a process this young,
	// but must be there.
	for _, family := range []string{"go_gc_duration_seconds", "process_cpu_seconds_total"} {
		if v := value(t, families, family); v < 0 {
			t.Errorf("%s = %v", family, v)
		}
	}
}

// Each request's duration is recorded under its command and its result
// (ok, or the CNI error code), so that an operator can tell slow ADDs
// from slow refusals.
func TestDaemonMetricsRecordDurationByCommandAndResult(t *testing.T) {
	m, err := newDaemonMetrics()
	if err != nil {
		t.Fatal(err)
	}
	m.observe("ADD", "ok", 300*time.Millisecond)
	m.observe("ADD", "ok", 40*time.Millisecond)
	m.observe("ADD", "11", 2*time.Second)
	m.observe("DEL", "ok", 10*time.Millisecond)
	durations, ok := scrape(t, m)["cninet_daemon_request_duration_seconds"]
	if !ok {
		t.Fatal("/metrics has no cninet_daemon_request_duration_seconds")
	}
	type key struct{ command, result string }
	want := map[key]struct {
		count uint64
		sum   float64
	}{
		{"ADD", "ok"}: {2, 0.34},
		{"ADD", "11"}: {1, 2},
		{"DEL", "ok"}: {1, 0.01},
	}
	got := map[key]bool{}
	for _, s := range durations.Metric {
		labels := map[string]string{}
		for _, l := range s.Label {
			labels[l.GetName()] = l.GetValue()
		}
		k := key{labels["command"], labels["result"]}
		w, ok := want[k]
		if !ok {
			t.Errorf("a duration series labelled %v, want only %v", labels, want)
			continue
		}
		h := s.GetHistogram()
		if h.GetSampleCount() != w.count || h.GetSampleSum() < w.sum-1e-9 || h.GetSampleSum() > w.sum+1e-9 {
			t.Errorf("%v: %d requests taking %vs, want %d taking %vs", k, h.GetSampleCount(), h.GetSampleSum(), w.count, w.sum)
		}
		got[k] = true
	}
	if len(got) != len(want) {
		t.Errorf("duration series for %v, want %v", got, want)
	}
}
