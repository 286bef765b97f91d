package netsandbox

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
)

// Workload is a network namespace standing in for a workload.
type Workload struct {
	NS   ns.NetNS
	Path string
}

// NewWorkload creates a workload namespace; it is removed when the test
// ends, unless the test deleted it first (Delete).
func NewWorkload(t testing.TB) *Workload {
	t.Helper()
	w, err := CreateWorkload()
	if err != nil {
		t.Fatalf("creating a workload namespace: %v", err)
	}
	t.Cleanup(func() { w.Delete() })
	return w
}

// CreateWorkload creates a workload namespace; the caller deletes it.
func CreateWorkload() (*Workload, error) {
	n, err := testutils.NewNS()
	if err != nil {
		return nil, err
	}
	return &Workload{NS: n, Path: n.Path()}, nil
}

// Delete removes the namespace, as a runtime does when a workload dies;
// deleting twice is fine.
func (w *Workload) Delete() error {
	if w.NS == nil {
		return nil
	}
	w.NS.Close()
	err := testutils.UnmountNS(w.NS)
	w.NS = nil
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}

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

// RepoRoot is the directory holding go.mod, found upwards from here.
func RepoRoot(t testing.TB) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the working directory")
		}
		dir = parent
	}
}

var (
	buildMu sync.Mutex
	built   = map[string]string{}
)

// BuildPlugin compiles testdata/plugins/<name> (once per test binary) and
// returns the directory holding the binary, named <name>.
func BuildPlugin(t testing.TB, name string) string {
	t.Helper()
	buildMu.Lock()
	defer buildMu.Unlock()
	if dir, ok := built[name]; ok {
		return dir
	}
	dir, err := os.MkdirTemp("", "cninet-plugin-")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, name), "./testdata/plugins/"+name)
	cmd.Dir = RepoRoot(t)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building plugin %s: %v\n%s", name, err, out)
	}
	built[name] = dir
	return dir
}

func removeBuilt() {
	buildMu.Lock()
	defer buildMu.Unlock()
	for _, dir := range built {
		os.RemoveAll(dir)
	}
}
