package main

import (
	"context"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
)

// The exposition names docs/observability.md documents, as the exporter writes them.
func TestMetricsReachPrometheusUnderTheDocumentedNames(t *testing.T) {
	mp, err := newMeterProvider()
	if err != nil {
		t.Fatal(err)
	}
	defer mp.Shutdown(context.Background())
	ipam := t.TempDir()
	conf, err := cninet.BridgeConfList(cninet.BridgeConfig{NetworkName: "nomad", IPv4Subnet: "198.18.0.0/24", IPAMDataDir: ipam})
	if err != nil {
		t.Fatal(err)
	}
	// The reservation a DEL failed to release: Teardown's cleanup removes it.
	if err := os.MkdirAll(filepath.Join(ipam, "nomad"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(ipam, "nomad", "198.18.0.2"), []byte("alloc-1\r\neth0"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := cninet.New(cninet.Config{ConfList: conf, CNI: &fakes.CNI{}, CacheDir: t.TempDir(), StateDir: t.TempDir(), PluginDirs: []string{t.TempDir()},
		IPTables:      func(bool) (host.IPTables, error) { return fakes.NewIPTables(), nil },
		NFTables:      func() (host.NFTables, error) { return &fakes.NFTables{}, nil },
		MeterProvider: mp})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	alloc := &cninet.Allocation{ID: "alloc-1"}
	if _, err := c.Setup(context.Background(), alloc, "/var/run/netns/x"); err != nil {
		t.Fatal(err)
	}
	if err := c.Teardown(context.Background(), alloc, ""); err != nil {
		t.Fatal(err)
	}
	_ = c.Status(context.Background()) // no plugins in PluginDirs: not ready
	rec := httptest.NewRecorder()
	promhttp.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`cninet_operations_total{cninet_operation="setup"`,
		`cninet_operation_duration_seconds_bucket{cninet_operation="teardown"`,
		`cninet_network_operations_total{cni_name="nomad",cninet_operation="attach"`,
		`cninet_network_operation_duration_seconds_count{cni_name="nomad",cninet_operation="detach"`,
		`cninet_add_attempts_total{cni_name="nomad",cninet_operation="attach"`,
		`cninet_operations_total{cninet_operation="status",error_type="plugin_missing"`,
		`cninet_networks{`,
		`cninet_network_ready{cni_name="nomad"`,
		`cninet_cleanup_removed_total{cni_name="nomad",cninet_backend="files",cninet_kind="reservation",cninet_operation="teardown"`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", grepCninet(string(body)))
	}
}

func grepCninet(body string) string {
	var out []string
	for _, line := range strings.Split(body, "\n") {
		if strings.HasPrefix(line, "cninet_") {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
