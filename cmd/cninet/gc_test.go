package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// plantCache writes libcni cache entries, as libcni names and writes
// them, into cacheDir/results: one per "network/id".
func plantCache(t *testing.T, cacheDir string, attachments ...string) map[string][]byte {
	t.Helper()
	results := filepath.Join(cacheDir, "results")
	if err := os.MkdirAll(results, 0o700); err != nil {
		t.Fatal(err)
	}
	planted := map[string][]byte{}
	for _, a := range attachments {
		network, id, _ := strings.Cut(a, "/")
		conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"bridge"}]}`, network)
		entry := fmt.Sprintf(`{"kind":"cniCacheV1","containerId":%q,"config":%q,"ifName":"eth0","networkName":%q,"netns":"/var/run/netns/%s",`+
			`"result":{"cniVersion":"1.0.0","ips":[{"address":"198.18.210.9/24"}]}}`,
			id, base64.StdEncoding.EncodeToString([]byte(conf)), network, id)
		path := filepath.Join(results, network+"-"+id+"-eth0")
		if err := os.WriteFile(path, []byte(entry), 0o600); err != nil {
			t.Fatal(err)
		}
		planted[path] = []byte(entry)
	}
	return planted
}

// gc --dry-run prints the library's plan (GCOptions.DryRun) and changes
// nothing. It runs in the test's own sandbox, whose libcni cache
// (/var/lib/cni, a tmpfs of the sandbox) holds the planted entries.
func TestGCDryRunListsWhatGCWouldRemoveAndChangesNothing(t *testing.T) {
	netsandbox.Require(t)
	dir := confDirOf(t, "clia", "clib")
	cache := "/var/lib/cni" // the sandbox's: go-cni, and so the CLI, caches there
	planted := plantCache(t, cache, "clia/dead-1", "clia/live-1", "clib/dead-2", "clib/live-1", "elsewhere/dead-3")
	t.Cleanup(func() {
		for path := range planted {
			os.Remove(path)
		}
	})
	state := t.TempDir()
	host := newHostCheck(t) // the planted entries in: the host must stay exactly so
	cases := []struct {
		name string
		args []string
		want []string // network/id of the cached attachments it would detach
	}{
		{"every network of --conf-dir, the live ids kept", []string{"--live", "live-1"}, []string{"clia/dead-1", "clib/dead-2"}},
		{"--network narrows it", []string{"--live", "live-1", "--network", "clia"}, []string{"clia/dead-1"}},
		{"an id live in one network is live in all", []string{"--live", " live-1 , dead-2"}, []string{"clia/dead-1"}},
		{"--none-live: every attachment of the networks", []string{"--none-live"}, []string{"clia/dead-1", "clia/live-1", "clib/dead-2", "clib/live-1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"gc", "--conf-dir", dir, "--state-dir", state, "--dry-run", "-o", "json"}, tc.args...)
			code, out, stderr := runCLI(args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var env struct {
				Result struct {
					DryRun      bool `json:"dry_run"`
					WouldRemove []struct {
						Kind, ID, Network, Detail string
					} `json:"would_remove"`
				}
			}
			if err := json.Unmarshal([]byte(out), &env); err != nil {
				t.Fatalf("%v:\n%s", err, out)
			}
			var got []string
			for _, it := range env.Result.WouldRemove {
				if it.Kind == "cached attachment" {
					got = append(got, it.Network+"/"+it.ID)
				}
			}
			slices.Sort(got)
			if !env.Result.DryRun || strings.Join(got, " ") != strings.Join(tc.want, " ") {
				t.Fatalf("would detach %q (dry_run %v), want %q:\n%s", got, env.Result.DryRun, tc.want, out)
			}
		})
	}
	code, out, _ := runCLI("gc", "--conf-dir", dir, "--state-dir", state, "--dry-run", "--live", "live-1")
	if code != 0 || !strings.Contains(out, `would remove cached attachment: id dead-1 network "clia": eth0`) || !strings.Contains(out, "nothing changed") {
		t.Fatalf("text: exit %d:\n%s", code, out)
	}
	for path, content := range planted {
		if now, err := os.ReadFile(path); err != nil || string(now) != string(content) {
			t.Errorf("%s changed: %v", path, err)
		}
	}
	host.assertUnchanged(t, "after the dry runs")
}

func TestGCRefusesWithoutNetworksNamed(t *testing.T) {
	code, _, stderr := runCLI("gc", "--none-live")
	if code != 2 || !strings.Contains(stderr, "never sweeps a default network") {
		t.Fatalf("exit %d, stderr %q; want a usage error refusing to sweep a default", code, stderr)
	}
}
