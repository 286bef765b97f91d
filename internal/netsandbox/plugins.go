package netsandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// PluginSet is one installed set of CNI reference plugins, and the
// backend its bridge masquerades and its portmap maps ports with.
type PluginSet struct {
	Name    string
	Dir     string
	Backend string // "iptables" or "nftables"
}

// PluginSets returns the plugin sets the suite runs against that are
// installed: Debian's (/usr/lib/cni, iptables only) and upstream's,
// built into .cache/cni/<version> by scripts/install-deps.sh, with each
// of its backends. A missing set is left out, and only that set: t fails
// (and goes on with the others) under CI=true, else it logs the set
// skipped. With none installed, t is Unavailable.
func PluginSets(t testing.TB) []PluginSet {
	t.Helper()
	found, missing := available(AllPluginSets(t))
	for _, why := range missing {
		if os.Getenv("CI") == "true" {
			t.Errorf("integration test cannot run on every plugin set (CI=true forbids skipping one): %s", why)
		} else {
			t.Logf("skipped: %s", why)
		}
	}
	if len(found) == 0 {
		Unavailable(t, "no plugin set is installed: "+strings.Join(missing, "; "))
	}
	return found
}

// available splits sets into those that can run here and the reasons
// the others cannot.
func available(sets []PluginSet) (found []PluginSet, missing []string) {
	for _, s := range sets {
		if why := s.Missing(); why != "" {
			missing = append(missing, why)
			continue
		}
		found = append(found, s)
	}
	return found, missing
}

// AllPluginSets is every plugin set the suite knows, installed or not.
func AllPluginSets(t testing.TB) []PluginSet {
	t.Helper()
	upstream := filepath.Join(RepoRoot(t), ".cache", "cni", "v1.9.1")
	return []PluginSet{
		{"debian-1.1.1", "/usr/lib/cni", "iptables"},
		{"upstream-v1.9.1", upstream, "iptables"},
		{"upstream-v1.9.1-nftables", upstream, "nftables"},
	}
}

// Missing says why the set cannot run on this host ("" when it can): its
// plugins are not installed, or its nftables backends need nft.
func (s PluginSet) Missing() string {
	if _, err := os.Stat(filepath.Join(s.Dir, "bridge")); err != nil {
		return "plugin set " + s.Name + " is not installed (run scripts/install-deps.sh): " + err.Error()
	}
	if _, err := lookPath("nft"); err != nil && s.Backend == "nftables" {
		return "plugin set " + s.Name + " needs nft (Debian's nftables; run scripts/install-deps.sh): " + err.Error()
	}
	return ""
}

// lookPath is exec.LookPath; a test replaces it.
var lookPath = exec.LookPath
