package main

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/internal/netsandbox"
)

func TestSetupCheckTeardownAndGCThroughTheCLI(t *testing.T) {
	netsandbox.Require(t)
	w := netsandbox.NewWorkload(t)
	dir, ipam := t.TempDir(), t.TempDir()
	if code, _, stderr := runCLI("conflist", "--network", "clinet", "--bridge", "clibr0", "--subnet", "198.18.200.0/24",
		"--ipam-data-dir", ipam, "--write", dir); code != 0 {
		t.Fatalf("conflist exit %d: %s", code, stderr)
	}
	common := []string{"--cni-path", "/usr/lib/cni", "--conflist", filepath.Join(dir, "clinet.conflist")}
	host := newHostCheck(t, "clibr0")
	code, out, stderr := runCLI(append([]string{"setup", "-o", "json", "--id", "cli-1", "--netns", w.Path, "-p", "28090:80/tcp"}, common...)...)
	if code != 0 {
		t.Fatalf("setup exit %d: %s", code, stderr)
	}
	var status struct{ Result map[string]string }
	if err := json.Unmarshal([]byte(out), &status); err != nil || !strings.HasPrefix(status.Result["address"], "198.18.200.") {
		t.Fatalf("setup printed %q (%v)", out, err)
	}
	addr := status.Result["address"]
	host.assertAttached(t, "after setup", addr, ipam, "clinet", "80")
	if code, _, stderr := runCLI(append([]string{"check", "--id", "cli-1", "--netns", w.Path, "-p", "28090:80/tcp"}, common...)...); code != 0 {
		t.Fatalf("check exit %d: %s", code, stderr)
	}
	w.Delete() // the workload died; its runner never tore it down
	code, out, stderr = runCLI(append([]string{"gc", "-o", "json", "--none-live"}, common...)...)
	if code != 0 || !strings.Contains(out, "cli-1") {
		t.Fatalf("gc exit %d, printed %s: %s", code, out, stderr)
	}
	assertSnakeCaseReport(t, out)
	host.assertDetached(t, "after gc", addr, ipam, "clinet")
	host.assertNothingLeft(t, "after gc")
	if code, _, stderr := runCLI(append([]string{"teardown", "--id", "cli-1"}, common...)...); code != 0 {
		t.Fatalf("teardown after gc exit %d: %s", code, stderr)
	}
	host.assertNothingLeft(t, "after the teardown after gc")
}

// assertSnakeCaseReport checks that a GC report printed by the CLI with
// --output json uses the documented keys, {"removed": [{"kind", "id",
// "detail"}]} as the envelope's result, and no other spelling
// (encoding/json would read "Removed" too, so the keys are compared as
// they are printed).
func assertSnakeCaseReport(t *testing.T, out string) {
	t.Helper()
	var env struct {
		Result map[string][]map[string]string `json:"result"`
	}
	if err := json.Unmarshal([]byte(out), &env); err != nil {
		t.Fatalf("gc printed %q: %v", out, err)
	}
	report := env.Result
	items, ok := report["removed"]
	if len(report) != 1 || !ok || len(items) == 0 {
		t.Fatalf("gc report keys: %q, want one key \"removed\" with items", out)
	}
	for _, it := range items {
		for key := range it {
			if !slices.Contains([]string{"kind", "id", "network", "backend", "detail"}, key) {
				t.Fatalf("gc report item %v has key %q, want only kind, id, network, backend and detail", it, key)
			}
		}
		if it["kind"] == "" || it["id"] == "" || it["detail"] == "" {
			t.Fatalf("gc report item %v, want kind, id and detail", it)
		}
	}
}

func TestTwoNetworksThroughTheCLI(t *testing.T) {
	netsandbox.Require(t)
	w := netsandbox.NewWorkload(t)
	dir, ipam := confDirWithIPAM(t, "clim1", "clim2")
	common := []string{"--cni-path", "/usr/lib/cni", "--conf-dir", dir, "--id", "cli-m"}
	joined := append([]string{"--network", "clim1", "--network", "clim2"}, common...)
	host := newHostCheck(t, "clibr-clim1", "clibr-clim2")
	code, out, stderr := runCLI(append([]string{"setup", "--output=json", "--netns", w.Path}, joined...)...)
	if code != 0 {
		t.Fatalf("setup exit %d: %s", code, stderr)
	}
	var env struct {
		Result struct {
			Interface string `json:"interface"`
			Networks  []struct{ Network, Interface, Address string }
		}
	}
	err := json.Unmarshal([]byte(out), &env)
	if status := env.Result; err != nil || status.Interface != "eth0" || len(status.Networks) != 2 ||
		status.Networks[1].Network != "clim2" || status.Networks[1].Interface != "eth1" || !strings.HasPrefix(status.Networks[1].Address, "198.18.211.") {
		t.Fatalf("setup printed %s (%v)", out, err)
	}
	for _, n := range env.Result.Networks {
		host.assertAttached(t, "after setup", n.Address, ipam, n.Network, "")
	}
	code, out, stderr = runCLI(append([]string{"check", "--netns", w.Path}, joined...)...)
	if code != 0 {
		t.Fatalf("check exit %d: %s%s", code, out, stderr)
	}
	w.Delete()
	code, out, stderr = runCLI("gc", "--cni-path", "/usr/lib/cni", "--conf-dir", dir, "--none-live")
	if code != 0 || !strings.Contains(out, "cli-m") {
		t.Fatalf("gc exit %d, printed %s: %s", code, out, stderr)
	}
	for _, n := range env.Result.Networks {
		host.assertDetached(t, "after gc", n.Address, ipam, n.Network)
	}
	host.assertNothingLeft(t, "after gc")
	if code, _, stderr := runCLI(append([]string{"teardown"}, joined...)...); code != 0 {
		t.Fatalf("teardown after gc exit %d: %s", code, stderr)
	}
	host.assertNothingLeft(t, "after the teardown after gc")
}
