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
	"sync"
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

// ghostCache writes, for each network, a cached result of ghost that is
// of's with only the id and the namespace changed: a dead attachment's
// stale cache naming the address of (so the firewall plugin's DEL of the
// ghost deletes of's rules), as after a reboot with IPAM on tmpfs.
func ghostCache(t *testing.T, networks []string, of, ghost string) {
	t.Helper()
	for _, network := range networks {
		for path, data := range cacheFiles(t, network, of) {
			var cached map[string]any
			if err := json.Unmarshal(data, &cached); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			cached["containerId"], cached["netns"] = ghost, "/run/netns/"+ghost // long gone
			out, err := json.Marshal(cached)
			if err != nil {
				t.Fatal(err)
			}
			name := network + "-" + ghost + strings.TrimPrefix(filepath.Base(path), network+"-"+of)
			if err := os.WriteFile(filepath.Join(libcniResults, name), out, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
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
// deletes by that address: the new workload's rules must stay.
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
	ipamDir := filepath.Join(nw.cfg.IPAMDataDir, nw.cfg.NetworkName)

	wOld := netsandbox.NewWorkload(t)
	oldPort, newPort := hostPort(nw.cfg.NetworkName, 0), hostPort(nw.cfg.NetworkName, 1)
	old := &cninet.Allocation{ID: "old", Ports: []cninet.Port{{Value: oldPort, To: 8080}}}
	stOld, err := c.Setup(ctxFor(t, time.Minute), old, wOld.Path)
	if err != nil {
		t.Fatal(err)
	}
	oldCache := cacheFiles(t, nw.cfg.NetworkName, old.ID)
	if err := c.Teardown(ctxFor(t, time.Minute), old, wOld.Path); err != nil {
		t.Fatal(err)
	}
	wOld.Delete()
	// The reboot: libcni's cache survives, host-local's tmpfs does not.
	for path, data := range oldCache {
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	emptyDir(t, ipamDir)

	wNew := netsandbox.NewWorkload(t)
	newAlloc := &cninet.Allocation{ID: "new", Ports: []cninet.Port{{Value: newPort, To: 8080}}}
	stNew, err := c.Setup(ctxFor(t, time.Minute), newAlloc, wNew.Path)
	if err != nil {
		t.Fatal(err)
	}
	if stNew.Address != stOld.Address || stNew.AddressIPv6 != stOld.AddressIPv6 {
		t.Fatalf("new got %s and %s, old had %s and %s: the history needs the same address",
			stNew.Address, stNew.AddressIPv6, stOld.Address, stOld.AddressIPv6)
	}
	reach := func(when string) { assertReachable(t, when, newPort, "new", nw.gw4, nw.gw6) }
	if onlyCache {
		reach = func(when string) { assertReachable(t, when, 8080, "new", addrsOf(stNew)...) }
		for _, a := range addrsOf(stNew) {
			if err := os.Remove(filepath.Join(ipamDir, a.String())); err != nil {
				t.Fatal(err)
			}
		}
	}
	serveHTTP(t, wNew, 8080, "new")
	assertForwardRules(t, "before the old allocation is removed", addrsOf(stNew), 2)
	reach("before the old allocation is removed")

	if err := remove(ctxFor(t, time.Minute), c, old, wOld.Path); err != nil {
		t.Fatal(err)
	}
	assertForwardRules(t, "after the old allocation is removed", addrsOf(stNew), 2)
	reach("after the old allocation is removed")
	if left, _ := filepath.Glob(filepath.Join(libcniResults, nw.cfg.NetworkName+"-old-*")); len(left) > 0 {
		t.Fatalf("the old allocation's cache is still there: %v", left)
	}

	if err := c.Teardown(ctxFor(t, time.Minute), newAlloc, wNew.Path); err != nil {
		t.Fatal(err)
	}
	wNew.Delete()
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
		oldPort, newPort := hostPort(nw.cfg.NetworkName, 0), hostPort(nw.cfg.NetworkName, 1)
		wOld := netsandbox.NewWorkload(t)
		old := &cninet.Allocation{ID: "old", Ports: []cninet.Port{{Value: oldPort, To: 8080}}}
		if _, err := c.Setup(ctxFor(t, time.Minute), old, wOld.Path); err != nil {
			t.Fatal(err)
		}
		oldCache := cacheFiles(t, nw.cfg.NetworkName, old.ID)
		if err := c.Teardown(ctxFor(t, time.Minute), old, wOld.Path); err != nil {
			t.Fatal(err)
		}
		wOld.Delete()
		for path, data := range oldCache {
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}
		emptyDir(t, filepath.Join(nw.cfg.IPAMDataDir, nw.cfg.NetworkName))
		wNew := netsandbox.NewWorkload(t)
		newAlloc := &cninet.Allocation{ID: "new", Ports: []cninet.Port{{Value: newPort, To: 8080}}}
		st, err := c.Setup(ctxFor(t, time.Minute), newAlloc, wNew.Path)
		if err != nil {
			t.Fatal(err)
		}
		assertForwardRules(t, "after new's Setup", addrsOf(st), 2)
		if err := c.Teardown(ctxFor(t, time.Minute), newAlloc, wNew.Path); err != nil {
			t.Fatal(err)
		}
		wNew.Delete()
		assertForwardRules(t, "after new's Teardown", addrsOf(st), 0)
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

// GC and Teardowns run at once, round after round, on workloads that
// join two networks (portmap's nftables DEL removes the id's rules on
// both), next to dead ids whose stale caches name the addresses of the
// live and the leaving workloads (so libcni's GC takes their firewall
// rules), with a live set that excludes the leaving ones or, taken before
// they stopped, still names some of them: each round leaves the host exactly as it found it — the live
// workloads intact and reachable, nothing of the departed ones, none of
// their rules added back.
func TestGCConcurrentWithTeardownsKeepsTheLiveAndAddsNothingBack(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		first, second := twoNetworks(t, set)
		c := newMultiConfigurator(t, set, first.conf, [][]byte{second.conf}, cninet.RetryPolicy{})
		allow := allowBoth(first, second)
		names := []string{first.cfg.NetworkName, second.cfg.NetworkName}
		port := func(i int) int { return hostPort(first.cfg.NetworkName, i) }
		base := baseline(t)
		const nLive, nLeaving, nDead, rounds = 2, 3, 1, 3
		var liveIDs []string
		var liveAddrs []netip.Addr
		liveWorkloads := map[string]*netsandbox.Workload{}
		liveAlloc := func(i int) *cninet.Allocation {
			return &cninet.Allocation{ID: fmt.Sprintf("live-%d", i), NetworkNames: names, Ports: []cninet.Port{{Value: port(i), To: 8080}}}
		}
		for i := 0; i < nLive; i++ {
			alloc, w := liveAlloc(i), netsandbox.NewWorkload(t)
			st, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path)
			if err != nil {
				t.Fatal(err)
			}
			serveHTTP(t, w, 8080, alloc.ID)
			liveIDs = append(liveIDs, alloc.ID)
			for _, n := range st.Networks {
				liveAddrs = append(liveAddrs, n.Address)
			}
			liveWorkloads[alloc.ID] = w
		}
		for r := 0; r < rounds; r++ {
			roundBase := snapshot(t)
			var leaving []*cninet.Allocation
			leavingNS := map[string]*netsandbox.Workload{}
			for i := 0; i < nLeaving+nDead; i++ {
				alloc := &cninet.Allocation{ID: fmt.Sprintf("r%d-%d", r, i), NetworkNames: names, Ports: []cninet.Port{{Value: port(nLive + i), To: 8080}}}
				w := netsandbox.NewWorkload(t)
				if _, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
					t.Fatal(err)
				}
				switch {
				case i == 0: // the leak-prone way: the namespace goes first
					w.Delete()
					fallthrough
				case i < nLeaving:
					leaving = append(leaving, alloc)
					leavingNS[alloc.ID] = w
				default:
					w.Delete() // dead: its runner is gone and never tears it down
				}
			}
			// Stale caches of dead ids naming the addresses of a live
			// workload and of the leaving ones.
			ghostCache(t, names, liveIDs[r%nLive], fmt.Sprintf("ghost-%d-live", r))
			for _, alloc := range leaving {
				ghostCache(t, names, alloc.ID, "ghost-"+alloc.ID)
			}
			// The runner's live list may be older than its last stops:
			// some leaving ids are still in it.
			gcLive := slices.Clone(liveIDs)
			for i := 1; i < len(leaving); i += 2 {
				gcLive = append(gcLive, leaving[i].ID)
			}
			var wg sync.WaitGroup
			errs := make(chan error, nLeaving+1)
			for i, alloc := range leaving {
				wg.Add(1)
				go func() {
					defer wg.Done()
					time.Sleep(time.Duration(i*r) * 15 * time.Millisecond) // vary the interleaving
					if err := c.Teardown(ctxFor(t, time.Minute), alloc, leavingNS[alloc.ID].Path); err != nil {
						errs <- fmt.Errorf("teardown %s: %w", alloc.ID, err)
					}
				}()
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				if _, err := c.GC(ctxFor(t, time.Minute), gcLive); err != nil {
					errs <- fmt.Errorf("GC: %w", err)
				}
			}()
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatalf("round %d: %v", r, err)
			}
			for _, w := range leavingNS {
				w.Delete()
			}
			if d := settled(func() []string { return diff(roundBase, snapshot(t), allow) }); len(d) > 0 {
				t.Fatalf("round %d changed the host:\n  %s", r, strings.Join(d, "\n  "))
			}
			assertForwardRules(t, fmt.Sprintf("round %d", r), liveAddrs, 2)
			for i, id := range liveIDs {
				assertReachable(t, fmt.Sprintf("round %d", r), port(i), id, first.gw4, second.gw4)
			}
		}
		for i, id := range liveIDs {
			if err := c.Teardown(ctxFor(t, time.Minute), liveAlloc(i), liveWorkloads[id].Path); err != nil {
				t.Fatal(err)
			}
			liveWorkloads[id].Delete()
		}
		assertNoLeaks(t, base, allow)
	})
}

// A reboot during ADD leaves libcni a zero-byte cache file (see
// containernetworking/cni#1055). GC removes it and nothing else; so does
// a Teardown of its id.
func TestZeroByteCacheFileIsRemovedByGCAndByTeardownAndNothingElse(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		nw := newNetwork(t, set, true)
		c := newConfigurator(t, set, nw.conf)
		base := baseline(t)
		w := netsandbox.NewWorkload(t)
		livePort := hostPort(nw.cfg.NetworkName, 0)
		live := &cninet.Allocation{ID: "live-0", Ports: []cninet.Port{{Value: livePort, To: 8080}}}
		if _, err := c.Setup(ctxFor(t, time.Minute), live, w.Path); err != nil {
			t.Fatal(err)
		}
		serveHTTP(t, w, 8080, live.ID)
		cases := []struct {
			name, id string
			run      func(id string) error
		}{
			{"GC with the live one live", "rebooted-gc", func(id string) error {
				report, err := c.GC(ctxFor(t, time.Minute), []string{live.ID})
				if err == nil && strings.Join(report.IDs(), ",") != id {
					err = fmt.Errorf("GC reported %v, want only %s", report.Removed, id)
				}
				return err
			}},
			{"Teardown of the rebooted id", "rebooted-td", func(id string) error {
				return c.Teardown(ctxFor(t, time.Minute), &cninet.Allocation{ID: id}, "/run/netns/"+id)
			}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				before := snapshot(t)
				empty := filepath.Join(libcniResults, nw.cfg.NetworkName+"-"+tc.id+"-eth0")
				if err := os.WriteFile(empty, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := tc.run(tc.id); err != nil {
					t.Fatal(err)
				}
				if d := diff(before, snapshot(t), nw.allowance()); len(d) > 0 {
					t.Fatalf("changed more than the empty cache file, or left it:\n  %s", strings.Join(d, "\n  "))
				}
				assertReachable(t, "afterwards", livePort, live.ID, nw.gw4, nw.gw6)
			})
		}
		if err := c.Teardown(ctxFor(t, time.Minute), live, w.Path); err != nil {
			t.Fatal(err)
		}
		w.Delete()
		assertNoLeaks(t, base, nw.allowance())
	})
}
