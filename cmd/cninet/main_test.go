package main

import (
	"bytes"
	"encoding/json"
	"github.com/sasha-s/go-deadlock"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

func TestMain(m *testing.M) {
	// Under -race go-cni guards itself with go-deadlock, whose goroutine ids
	// read 0 on this Go release: every pair of concurrent Setups then looks
	// like one goroutine locking twice, and the detector exits the process.
	deadlock.Opts.Disable = true
	netsandbox.Main(m)
}

func runCLI(args ...string) (code int, stdout, stderr string) {
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func TestExitCodes(t *testing.T) {
	cases := []struct {
		name string
		args []string
		code int
	}{
		{"no command is a usage error", nil, 2},
		{"an unknown command is a usage error", []string{"frobnicate"}, 2},
		{"--help succeeds", []string{"--help"}, 0},
		{"a command's --help succeeds", []string{"setup", "--help"}, 0},
		{"an unknown flag is a usage error", []string{"conflist", "--nope"}, 2},
		{"setup without --id is a usage error", []string{"setup", "--netns", "/var/run/netns/x"}, 2},
		{"setup without --netns is a usage error", []string{"setup", "--id", "a"}, 2},
		{"a malformed port mapping is a usage error", []string{"setup", "--id", "a", "--netns", "/x", "-p", "80:http"}, 2},
		{"gc without a live set is a usage error", []string{"gc"}, 2},
		{"an invalid subnet is a usage error", []string{"conflist", "--subnet", "198.18.0.1/24"}, 2},
		{"a stray argument is a usage error", []string{"status", "extra"}, 2},
		{"a network missing from --conf-dir is a failure", []string{"status", "--conf-dir", os.TempDir(), "--network", "absent-net"}, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runCLI(tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr:\n%s", code, tc.code, stderr)
			}
		})
	}
}

func TestConflistPrintsTheDefaultAndWritesAtomically(t *testing.T) {
	code, out, stderr := runCLI("conflist", "--subnet", "198.18.0.0/24", "--ipv6-subnet", "fd00:198:18::/64", "--hairpin")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	cfg := cninet.DefaultBridgeConfig()
	cfg.IPv4Subnet, cfg.IPv6Subnet, cfg.HairpinMode = "198.18.0.0/24", "fd00:198:18::/64", true
	want, _ := cninet.BridgeConfList(cfg)
	if out != string(want) {
		t.Fatalf("printed:\n%s\nwant:\n%s", out, want)
	}
	dir := t.TempDir()
	code, out, _ = runCLI("conflist", "--network", "edge", "--bridge", "edge0", "--write", dir)
	if code != 0 || strings.TrimSpace(out) != filepath.Join(dir, "edge.conflist") {
		t.Fatalf("exit %d, printed %q", code, out)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "edge.conflist"))
	var list struct{ Name string }
	if err != nil || json.Unmarshal(raw, &list) != nil || list.Name != "edge" {
		t.Fatalf("written conflist: %v %s", err, raw)
	}
}

func TestDemoRunsTheWholeStoryWithoutLeaks(t *testing.T) {
	netsandbox.Require(t)
	var out, errOut bytes.Buffer
	if err := runDemo([]string{"/usr/lib/cni"}, cninet.BackendIPTables, false, false, &out, &errOut); err != nil {
		t.Fatalf("%v\n%s\n%s", err, out.String(), errOut.String())
	}
	for _, want := range []string{`said "hello from web-1"`, "leaks: 0"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
}

func TestSetupCheckTeardownAndGCThroughTheCLI(t *testing.T) {
	netsandbox.Require(t)
	w := netsandbox.NewWorkload(t)
	common := []string{"--cni-path", "/usr/lib/cni", "--network", "clinet", "--bridge", "clibr0", "--subnet", "198.18.200.0/24", "--ipam-data-dir", t.TempDir()}
	code, out, stderr := runCLI(append([]string{"setup", "--id", "cli-1", "--netns", w.Path, "-p", "28090:80/tcp"}, common...)...)
	if code != 0 {
		t.Fatalf("setup exit %d: %s", code, stderr)
	}
	var status map[string]string
	if err := json.Unmarshal([]byte(out), &status); err != nil || !strings.HasPrefix(status["address"], "198.18.200.") {
		t.Fatalf("setup printed %q (%v)", out, err)
	}
	if code, _, stderr := runCLI(append([]string{"check", "--id", "cli-1", "--netns", w.Path, "-p", "28090:80/tcp"}, common...)...); code != 0 {
		t.Fatalf("check exit %d: %s", code, stderr)
	}
	w.Delete() // the workload died; its runner never tore it down
	code, out, stderr = runCLI(append([]string{"gc", "--none-live"}, common...)...)
	if code != 0 || !strings.Contains(out, "cli-1") {
		t.Fatalf("gc exit %d, printed %s: %s", code, out, stderr)
	}
	assertSnakeCaseReport(t, out)
	if code, _, stderr := runCLI(append([]string{"teardown", "--id", "cli-1"}, common...)...); code != 0 {
		t.Fatalf("teardown after gc exit %d: %s", code, stderr)
	}
}

// assertSnakeCaseReport checks that a GC report printed by the CLI uses
// the documented keys, {"removed": [{"kind", "id", "detail"}]}, and no
// other spelling (encoding/json would read "Removed" too, so the keys are
// compared as they are printed).
func assertSnakeCaseReport(t *testing.T, out string) {
	t.Helper()
	var report map[string][]map[string]string
	if err := json.Unmarshal([]byte(out), &report); err != nil {
		t.Fatalf("gc printed %q: %v", out, err)
	}
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
