package netsandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// PluginSet is one installed set of CNI reference plugins, and the
// backend its bridge masquerades and its portmap maps ports with.
type PluginSet struct {
	Name    string
	Dir     string
	Backend string // "iptables" or "nftables"
}

// PluginSets returns the plugin sets the suite runs against: Debian's
// (/usr/lib/cni, iptables only) and upstream's, built into
// .cache/cni/<version> by scripts/install-deps.sh, with each of its
// backends. A missing set skips (fails under CI=true).
func PluginSets(t testing.TB) []PluginSet {
	t.Helper()
	upstream := filepath.Join(RepoRoot(t), ".cache", "cni", "v1.9.1")
	sets := []PluginSet{
		{"debian-1.1.1", "/usr/lib/cni", "iptables"},
		{"upstream-v1.9.1", upstream, "iptables"},
		{"upstream-v1.9.1-nftables", upstream, "nftables"},
	}
	var found []PluginSet
	for _, s := range sets {
		if _, err := os.Stat(filepath.Join(s.Dir, "bridge")); err != nil {
			Unavailable(t, "plugin set "+s.Name+" is not installed (run scripts/install-deps.sh): "+err.Error())
			continue
		}
		if _, err := exec.LookPath("nft"); err != nil && s.Backend == "nftables" {
			Unavailable(t, "plugin set "+s.Name+" needs nft (Debian's nftables; run scripts/install-deps.sh): "+err.Error())
			continue
		}
		found = append(found, s)
	}
	return found
}
