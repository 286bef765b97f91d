package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet"
)

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
