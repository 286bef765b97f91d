package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// Host histories in which two attachments hold the same address over
// time: whatever removes the one that is gone must leave the one that
// lives exactly as it was.

// libcniResults is libcni's cache directory inside the sandbox.
const libcniResults = "/var/lib/cni/results"

// forwardRules counts the firewall plugin's CNI-FORWARD rules naming
// addr as a host route (/32 or /128).
func forwardRules(t *testing.T, addr netip.Addr) int {
	t.Helper()
	bin := "iptables"
	if addr.Is6() {
		bin = "ip6tables"
	}
	out, err := exec.Command(bin, "-w", "5", "-S", "CNI-FORWARD").CombinedOutput()
	if err != nil {
		t.Fatalf("%s -S CNI-FORWARD: %v\n%s", bin, err, out)
	}
	prefix := netip.PrefixFrom(addr, addr.BitLen()).String()
	n := 0
	for _, line := range strings.Split(string(out), "\n") {
		if slices.Contains(strings.Fields(line), prefix) {
			n++
		}
	}
	return n
}

// addrsOf returns a status's addresses: its IPv4 and, when it has one
// of its own, its IPv6.
func addrsOf(st *cninet.NetworkStatus) []netip.Addr {
	addrs := []netip.Addr{st.Address}
	if st.AddressIPv6.IsValid() && st.AddressIPv6 != st.Address {
		addrs = append(addrs, st.AddressIPv6)
	}
	return addrs
}

// assertForwardRules fails unless each address has want CNI-FORWARD rules.
func assertForwardRules(t *testing.T, when string, addrs []netip.Addr, want int) {
	t.Helper()
	for _, a := range addrs {
		if got := forwardRules(t, a); got != want {
			t.Fatalf("%s: %d CNI-FORWARD rule(s) name %s, want %d", when, got, a, want)
		}
	}
}

// assertReachable fails unless the workload answers on port through every
// gateway.
func assertReachable(t *testing.T, when string, port int, want string, gws ...netip.Addr) {
	t.Helper()
	for _, gw := range gws {
		if body, err := fetch(gw, port); err != nil || body != "hello from "+want {
			t.Fatalf("%s: %s via %s:%d answered %q, %v", when, want, gw, port, body, err)
		}
	}
}

// cacheFiles returns libcni's cached results of id on the network.
func cacheFiles(t *testing.T, network, id string) map[string][]byte {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(libcniResults, network+"-"+id+"-*"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, p := range paths {
		if files[p], err = os.ReadFile(p); err != nil {
			t.Fatal(err)
		}
	}
	if len(files) == 0 {
		t.Fatalf("no cached result of %s on %s", id, network)
	}
	return files
}

// emptyDir removes everything in dir, as a reboot empties a tmpfs.
func emptyDir(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
}

// removeOld is how a runner gets rid of a pre-reboot allocation.
type removeOld func(ctx context.Context, c *cninet.Configurator, old *cninet.Allocation, oldNetns string) error

var removeOldWays = []struct {
	name   string
	remove removeOld
}{
	{"a Teardown of the pre-reboot allocation", func(ctx context.Context, c *cninet.Configurator, old *cninet.Allocation, netns string) error {
		return c.Teardown(ctx, old, netns)
	}},
	{"a GC with only the new allocation live", func(ctx context.Context, c *cninet.Configurator, _ *cninet.Allocation, _ string) error {
		_, err := c.GC(ctx, []string{"new"})
		return err
	}},
}

// After a reboot with host-local's reservations on tmpfs and libcni's
// cache on disk, a new workload gets the address an old one had, and the
// old one's cache still names it. The firewall plugin's DEL of the old one
// deletes by the addresses of that cache: it must never see the new
// workload's, whose rules stay there at every instant.
func TestRebootWithIPAMOnTmpfsKeepsTheNewHolderOfARecycledAddress(t *testing.T) {
	for _, way := range removeOldWays {
		t.Run(way.name, func(t *testing.T) {
			eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
				testRecycledAddress(t, set, way.remove, false)
			})
		})
	}
}

// With static IPAM, or a reservation directory wiped while its workloads
// live, and neither a masquerade nor a port rule naming the address, a
// live workload's cached result is the only proof that it holds its
// address; a dead one's cache naming the same address proves nothing
// against it.
func TestOnlyACachedResultProvesTheNewHolderOfARecycledAddress(t *testing.T) {
	for _, way := range removeOldWays {
		t.Run(way.name, func(t *testing.T) {
			eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
				testRecycledAddress(t, set, way.remove, true)
			})
		})
	}
}

// withoutMasqueradeOrPorts is conf without the bridge's masquerade and
// without portmap: nothing but the firewall's rules names an address.
func withoutMasqueradeOrPorts(t *testing.T, conf []byte) []byte {
	t.Helper()
	var list map[string]any
	if err := json.Unmarshal(conf, &list); err != nil {
		t.Fatal(err)
	}
	var plugins []any
	for _, p := range list["plugins"].([]any) {
		plugin := p.(map[string]any)
		switch plugin["type"] {
		case "portmap":
			continue
		case "bridge":
			plugin["ipMasq"] = false
		}
		plugins = append(plugins, plugin)
	}
	list["plugins"] = plugins
	out, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// reboot is the history both ways round start from: "old" set up and torn
// down, its cache put back (it survived the reboot), host-local's
// directory emptied (its tmpfs did not), and "new" set up on the same
// address.
type reboot struct {
	old, new *cninet.Allocation
	oldNetns string
	newNS    *netsandbox.Workload
	newAddrs []netip.Addr
	newPort  int
	ipamDir  string
}

func playReboot(t *testing.T, c *cninet.Configurator, nw network) reboot {
	t.Helper()
	r := reboot{ipamDir: filepath.Join(nw.cfg.IPAMDataDir, nw.cfg.NetworkName), newPort: hostPort(nw.cfg.NetworkName, 1)}
	wOld := netsandbox.NewWorkload(t)
	r.old = &cninet.Allocation{ID: "old", Ports: []cninet.Port{{Value: hostPort(nw.cfg.NetworkName, 0), To: 8080}}}
	stOld, err := c.Setup(ctxFor(t, time.Minute), r.old, wOld.Path)
	if err != nil {
		t.Fatal(err)
	}
	oldCache := cacheFiles(t, nw.cfg.NetworkName, r.old.ID)
	if err := c.Teardown(ctxFor(t, time.Minute), r.old, wOld.Path); err != nil {
		t.Fatal(err)
	}
	wOld.Delete()
	r.oldNetns = wOld.Path
	for path, data := range oldCache {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	emptyDir(t, r.ipamDir)
	r.newNS = netsandbox.NewWorkload(t)
	r.new = &cninet.Allocation{ID: "new", Ports: []cninet.Port{{Value: r.newPort, To: 8080}}}
	stNew, err := c.Setup(ctxFor(t, time.Minute), r.new, r.newNS.Path)
	if err != nil {
		t.Fatal(err)
	}
	if stNew.Address != stOld.Address || stNew.AddressIPv6 != stOld.AddressIPv6 {
		t.Fatalf("new got %s and %s, old had %s and %s: the history needs the same address",
			stNew.Address, stNew.AddressIPv6, stOld.Address, stOld.AddressIPv6)
	}
	r.newAddrs = addrsOf(stNew)
	return r
}

// testRecycledAddress plays the reboot history; onlyCache leaves new's
// cached result as the only proof of its address: no reservation, no
// masquerade or port rule.
func testRecycledAddress(t *testing.T, set netsandbox.PluginSet, remove removeOld, onlyCache bool) {
	nw := newNetwork(t, set, true)
	if onlyCache {
		nw.conf = withoutMasqueradeOrPorts(t, nw.conf)
	}
	c := newConfigurator(t, set, nw.conf)
	base := baseline(t)
	r := playReboot(t, c, nw)
	reach := func(when string) { assertReachable(t, when, r.newPort, "new", nw.gw4, nw.gw6) }
	if onlyCache {
		reach = func(when string) { assertReachable(t, when, 8080, "new", r.newAddrs...) }
		for _, a := range r.newAddrs {
			if err := os.Remove(filepath.Join(r.ipamDir, a.String())); err != nil {
				t.Fatal(err)
			}
		}
	}
	serveHTTP(t, r.newNS, 8080, "new")
	assertForwardRules(t, "before the old allocation is removed", r.newAddrs, 2)
	reach("before the old allocation is removed")

	var err error
	sampleWhile(t, "new's CNI-FORWARD rules while the old allocation is removed", 2*len(r.newAddrs),
		func() (int, error) { return countForwardRules(r.newAddrs) },
		func() { err = remove(ctxFor(t, time.Minute), c, r.old, r.oldNetns) })
	if err != nil {
		t.Fatal(err)
	}
	assertForwardRules(t, "after the old allocation is removed", r.newAddrs, 2)
	reach("after the old allocation is removed")
	if left, _ := filepath.Glob(filepath.Join(libcniResults, nw.cfg.NetworkName+"-old-*")); len(left) > 0 {
		t.Fatalf("the old allocation's cache is still there: %v", left)
	}

	if err := c.Teardown(ctxFor(t, time.Minute), r.new, r.newNS.Path); err != nil {
		t.Fatal(err)
	}
	r.newNS.Delete()
	assertNoLeaks(t, base, nw.allowance())
}

// The same history the other way round: the new holder goes first. A
// stale cache naming its address must not keep its rules alive: its
// Teardown removes them, and a GC then collects the old cache.
func TestRebootNewHolderTornDownFirstLeavesNothingOnceTheOldIsCollected(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		nw := newNetwork(t, set, true)
		c := newConfigurator(t, set, nw.conf)
		base := baseline(t)
		r := playReboot(t, c, nw)
		assertForwardRules(t, "after new's Setup", r.newAddrs, 2)
		if err := c.Teardown(ctxFor(t, time.Minute), r.new, r.newNS.Path); err != nil {
			t.Fatal(err)
		}
		r.newNS.Delete()
		assertForwardRules(t, "after new's Teardown", r.newAddrs, 0)
		if _, err := c.GC(ctxFor(t, time.Minute), []string{}); err != nil {
			t.Fatal(err)
		}
		assertNoLeaks(t, base, nw.allowance())
	})
}

// diff is what changed between two snapshots, both ways, besides shared
// infrastructure.
func diff(before, after netsandbox.Snapshot, allow netsandbox.Allowance) []string {
	var out []string
	for _, l := range netsandbox.Leaks(before, after, allow) {
		out = append(out, "added "+l)
	}
	for _, l := range netsandbox.Leaks(after, before, allow) {
		out = append(out, "removed "+l)
	}
	return out
}

func snapshot(t *testing.T) netsandbox.Snapshot { t.Helper(); return baseline(t) }

// settled returns changes() once it names no host end of a veth: the
// kernel destroys a deleted namespace, and the host ends of its veths
// with it, a moment after its last reference goes. It waits up to 10s.
func settled(changes func() []string) []string {
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got := changes()
		waiting := len(got) > 0 && time.Now().Before(deadline)
		for _, c := range got {
			waiting = waiting && strings.Contains(c, "link veth")
		}
		if !waiting {
			return got
		}
	}
}

// hostPort is a host port for the i-th mapping of a test network: each
// network has its own ten, so that a failed test's leftovers cannot
// answer for another's.
func hostPort(network string, i int) int {
	var n int
	if _, err := fmt.Sscanf(network, "it%d", &n); err != nil {
		panic(err)
	}
	return 28400 + 10*n + i
}
