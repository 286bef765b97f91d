package main

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/internal/identity"
	"github.com/seed1280861d/cninet/internal/registry"
)

func TestStatusAttachmentsListsTheHostRegistry(t *testing.T) {
	state := t.TempDir()
	reg, err := registry.Open(state)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []*registry.Record{
		{Owner: "nomad", Key: identity.Key{Network: "web", ID: "a1", IfName: "eth0"}, State: registry.Attached,
			Addresses:    []netip.Addr{netip.MustParseAddr("198.18.0.5")},
			Capabilities: map[string]json.RawMessage{"portMappings": json.RawMessage(`[{"hostPort":28080,"containerPort":8080,"protocol":"tcp"}]`)}},
		{Owner: "cninet-daemon", Key: identity.Key{Network: "db", ID: "b2", IfName: "eth1"}, State: registry.Adding},
		{Owner: "containerd", Key: identity.Key{Network: "db", ID: "b2.net1", IfName: "net1"}, RuntimeID: "b2", State: registry.Attached},
	} {
		if err := reg.Put(r); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name string
		args []string
		want []string // lines (text) that must appear
		not  []string
	}{
		{"every owner's attachment is listed", []string{"status", "--attachments", "--state-dir", state},
			[]string{"nomad", "web", "a1", "198.18.0.5", "28080:8080/tcp", "cninet-daemon", "eth1", "adding", "b2.net1 (of b2)"}, nil},
		{"--network narrows the list", []string{"status", "--attachments", "--state-dir", state, "--network", "db"},
			[]string{"cninet-daemon", "b2"}, []string{"a1", "198.18.0.5"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, stderr := runCLI(tt.args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			for _, w := range tt.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(out, n) {
					t.Errorf("output has %q:\n%s", n, out)
				}
			}
		})
	}
	code, out, stderr := runCLI("status", "--attachments", "--state-dir", state, "-o", "json")
	var env struct {
		OK     bool `json:"ok"`
		Result struct {
			Attachments []struct{ Owner, Network, ID, RuntimeID string } `json:"attachments"`
		} `json:"result"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &env) != nil || !env.OK || len(env.Result.Attachments) != 3 ||
		env.Result.Attachments[0].ID != "a1" || env.Result.Attachments[1].Owner != "cninet-daemon" || env.Result.Attachments[2].RuntimeID != "b2" {
		t.Fatalf("JSON: exit %d, %s (%s)", code, out, stderr)
	}
}

// A registry file this cninet cannot read is listed, state
// "unreadable", kept, and named on stderr (exit 1).
func TestStatusAttachmentsListsAnUnreadableRecord(t *testing.T) {
	state := t.TempDir()
	path := filepath.Join(state, "attachments", "c9", "web", "eth0")
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(`{"version": 2}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCLI("status", "--attachments", "--state-dir", state)
	if code != 1 || !strings.Contains(out, "c9") || !strings.Contains(out, "unreadable") || !strings.Contains(stderr, path) {
		t.Fatalf("exit %d, stdout:\n%s\nstderr:\n%s\nwant exit 1, c9 listed unreadable, and the file named", code, out, stderr)
	}
	if raw, err := os.ReadFile(path); err != nil || string(raw) != `{"version": 2}` {
		t.Fatalf("the file after the listing: %q, %v", raw, err)
	}
}
