package integration

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// A drift is something that happens to a host under live workloads: a
// firewall reload, an operator's command, a file removed.
type drift struct {
	name string
	// applies says whether the drift means anything on the plugin set
	// (nftables drifts on the nftables backends, say).
	applies func(set netsandbox.PluginSet) bool
	do      func(t *testing.T, d driftScene)
	// lost: what it removes cannot come back in place (the workload's
	// veth): Repair is ErrNotRepairable.
	lost bool
}

// driftScene is what a drift may act on: the network and the workload
// it targets.
type driftScene struct {
	nw         network
	id         string
	addrs      []netip.Addr
	ifWorkload string // the host's end of the workload's veth
}

func always(netsandbox.PluginSet) bool { return true }

func onIPTables(set netsandbox.PluginSet) bool { return set.Backend == "iptables" }

func onNFTables(set netsandbox.PluginSet) bool { return set.Backend == "nftables" }

func run(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// deleteRulesMatching deletes, in both families' table, every rule of
// chain whose iptables -S line contains all of subs.
func deleteRulesMatching(t *testing.T, table, chain string, subs ...string) {
	t.Helper()
	n := 0
	for _, bin := range []string{"iptables", "ip6tables"} {
		out, err := exec.Command(bin, "-t", table, "-S", chain).Output()
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(out), "\n") {
			if !strings.HasPrefix(line, "-A ") || slices.ContainsFunc(subs, func(s string) bool { return !strings.Contains(line, s) }) {
				continue
			}
			spec, err := shellSplit(strings.TrimPrefix(line, "-A "+chain+" "))
			if err != nil {
				t.Fatal(err)
			}
			run(t, bin, append([]string{"-t", table, "-D", chain}, spec...)...)
			n++
		}
	}
	if n == 0 {
		t.Fatalf("no rule of %s %s names %q: the drift did nothing", table, chain, subs)
	}
}

// shellSplit splits an iptables -S line as a shell would.
func shellSplit(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inQuote, escaped, any := false, false, false
	for _, r := range s {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
		case r == '\\':
			escaped = true
		case r == '"':
			inQuote, any = !inQuote, true
		case r == ' ' && !inQuote:
			if cur.Len() > 0 || any {
				out = append(out, cur.String())
				cur.Reset()
				any = false
			}
		default:
			cur.WriteRune(r)
		}
	}
	if inQuote {
		return nil, fmt.Errorf("unbalanced quote in %q", s)
	}
	if cur.Len() > 0 || any {
		out = append(out, cur.String())
	}
	return out, nil
}

var drifts = []drift{
	{name: "the workload's DNAT jumps deleted", applies: onIPTables, do: func(t *testing.T, d driftScene) {
		deleteRulesMatching(t, "nat", "CNI-HOSTPORT-DNAT", fmt.Sprintf(`id: \"%s\"`, d.id))
	}},
	{name: "its forward rules deleted", applies: always, do: func(t *testing.T, d driftScene) {
		for _, a := range d.addrs {
			deleteRulesMatching(t, "filter", "CNI-FORWARD", a.String()+"/")
		}
	}},
	{name: "its masquerade jump deleted", applies: onIPTables, do: func(t *testing.T, d driftScene) {
		deleteRulesMatching(t, "nat", "POSTROUTING", fmt.Sprintf(`id: \"%s\"`, d.id))
	}},
	{name: "the nat table flushed", applies: onIPTables, do: func(t *testing.T, _ driftScene) {
		run(t, "iptables", "-t", "nat", "-F")
		run(t, "ip6tables", "-t", "nat", "-F")
	}},
	{name: "every table flushed and its chains deleted (a firewall reload)", applies: always, do: func(t *testing.T, _ driftScene) {
		for _, bin := range []string{"iptables", "ip6tables"} {
			for _, table := range []string{"nat", "filter"} {
				run(t, bin, "-t", table, "-F")
				run(t, bin, "-t", table, "-X")
			}
		}
	}},
	{name: "nft flush ruleset", applies: always, do: func(t *testing.T, _ driftScene) {
		run(t, "nft", "flush", "ruleset")
	}},
	{name: "the hostport table flushed", applies: onNFTables, do: func(t *testing.T, _ driftScene) {
		run(t, "nft", "flush", "table", "ip", "cni_hostport")
	}},
	{name: "the masquerade table flushed", applies: onNFTables, do: func(t *testing.T, _ driftScene) {
		run(t, "nft", "flush", "table", "inet", "cni_plugins_masquerade")
	}},
	{name: "its reservation file deleted", applies: always, do: func(t *testing.T, d driftScene) {
		for _, a := range d.addrs {
			if err := os.Remove(filepath.Join(d.nw.cfg.IPAMDataDir, d.nw.cfg.NetworkName, a.String())); err != nil {
				t.Fatal(err)
			}
		}
	}},
	{name: "its cached result deleted", applies: always, do: func(t *testing.T, d driftScene) {
		if err := os.Remove(filepath.Join("/var/lib/cni/results", d.nw.cfg.NetworkName+"-"+d.id+"-eth0")); err != nil {
			t.Fatal(err)
		}
	}},
	{name: "the host's end of its veth deleted", applies: always, lost: true, do: func(t *testing.T, d driftScene) {
		run(t, "ip", "link", "del", d.ifWorkload)
	}},
}

// Every drift on every plugin set, one after another on one pair of
// workloads (see checkAndRepairEachDrift).
func TestCheckSeesEachDriftAndRepairRestoresItInPlace(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		nw := newNetwork(t, set, false)
		c := newConfigurator(t, set, nw.conf)
		base := baseline(t)
		checkAndRepairEachDrift(t, nw, c, driftsOn(set))
		assertNoLeaks(t, base, nw.allowance())
	})
}

// driftsOn are the drifts that mean something on set.
func driftsOn(set netsandbox.PluginSet) []drift {
	var out []drift
	for _, d := range drifts {
		if d.applies(set) {
			out = append(out, d)
		}
	}
	return out
}

// driftsNamed are the drifts of those names, in drifts' order.
func driftsNamed(t *testing.T, names ...string) []drift {
	t.Helper()
	var out []drift
	for _, d := range drifts {
		if slices.Contains(names, d.name) {
			out = append(out, d)
		}
	}
	if len(out) != len(names) {
		t.Fatalf("drifts named %q: found %d", names, len(out))
	}
	return out
}

// driftWorkload is a live workload of a drift story: its allocation and
// namespace, its addresses (IPv4, then IPv6 on a dual-stack network) and
// the host port it maps to its HTTP server's 8080.
type driftWorkload struct {
	alloc *cninet.Allocation
	w     *netsandbox.Workload
	addrs []netip.Addr
	port  int
}

// setUpDriftWorkload sets id up on nw through c, mapping host port port,
// and serves HTTP in it.
func setUpDriftWorkload(t *testing.T, c *cninet.Configurator, nw network, id string, port int) driftWorkload {
	t.Helper()
	w := netsandbox.NewWorkload(t)
	alloc := &cninet.Allocation{ID: id, Ports: []cninet.Port{{Label: "http", Value: port, To: 8080}}}
	st, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path)
	if err != nil {
		t.Fatal(err)
	}
	serveHTTP(t, w, 8080, id)
	d := driftWorkload{alloc: alloc, w: w, addrs: []netip.Addr{st.Address}, port: port}
	if nw.gw6.IsValid() {
		if !st.AddressIPv6.Is6() {
			t.Fatalf("%s on the dual-stack %s has no IPv6 address: %+v", id, nw.cfg.NetworkName, st)
		}
		d.addrs = append(d.addrs, st.AddressIPv6)
	}
	return d
}

// rules are d's firewall rules and chains (ruleLines).
func (d driftWorkload) rules(t *testing.T, nw network) []string {
	t.Helper()
	return ruleLines(t, nw.cfg.NetworkName, d.alloc.ID, d.addrs)
}

// assertServed fails unless d answers on its host port through each of
// nw's gateways.
func (d driftWorkload) assertServed(t *testing.T, nw network, when string) {
	t.Helper()
	assertReachable(t, when, d.port, d.alloc.ID, nw.gateways()...)
}

// tearDown tears d down through c and deletes its namespace.
func (d driftWorkload) tearDown(t *testing.T, c *cninet.Configurator) {
	t.Helper()
	if err := c.Teardown(ctxFor(t, time.Minute), d.alloc, d.w.Path); err != nil {
		t.Fatal(err)
	}
	d.w.Delete()
}

// assertNamesEachAddress fails unless some line of rules names each of
// d's addresses: a family the plugins wrote nothing for could not be
// seen restored.
func (d driftWorkload) assertNamesEachAddress(t *testing.T, rules []string) {
	t.Helper()
	for _, a := range d.addrs {
		if !slices.ContainsFunc(rules, func(l string) bool { return strings.Contains(l, a.String()) }) {
			t.Fatalf("no rule of %s names its address %s:\n  %s", d.alloc.ID, a, strings.Join(rules, "\n  "))
		}
	}
}

// checkAndRepairEachDrift sets two workloads up on nw through c, each
// mapping a host port of its own, and Check of each is nil. Then, for
// each of ds in turn, applied to the first: Check names what is missing;
// Repair restores it (or, for what cannot come back in place, is
// ErrNotRepairable and changes nothing): the workload's rules equal, as a
// multiset, what the plugins wrote at Setup, its port answers through
// every gateway, a second Repair changes nothing, and the neighbour's
// rules, sampled from a second goroutine, never drop during the repair
// (a neighbour the drift took rules of too is repaired first, whole).
// Both are torn down at the end; the caller audits the host.
func checkAndRepairEachDrift(t *testing.T, nw network, c *cninet.Configurator, ds []drift) {
	t.Helper()
	ctx := ctxFor(t, 5*time.Minute)
	a := setUpDriftWorkload(t, c, nw, "drift-a", hostPort(nw.cfg.NetworkName, 0))
	b := setUpDriftWorkload(t, c, nw, "drift-b", hostPort(nw.cfg.NetworkName, 1))
	for _, wl := range []driftWorkload{a, b} {
		if err := c.Check(ctx, wl.alloc, wl.w.Path); err != nil {
			t.Fatalf("Check of the healthy %s: %v", wl.alloc.ID, err)
		}
	}
	whole, wholeB := a.rules(t, nw), b.rules(t, nw)
	a.assertNamesEachAddress(t, whole)
	for _, d := range ds {
		t.Run(d.name, func(t *testing.T) {
			scene := driftScene{nw: nw, id: a.alloc.ID, addrs: a.addrs, ifWorkload: hostVeth(t, c, nw, a.alloc.ID)}
			d.do(t, scene)
			err := c.Check(ctx, a.alloc, a.w.Path)
			var de *cninet.DriftError
			if !errors.Is(err, cninet.ErrCheckFailed) || !errors.As(err, &de) || len(de.Drifts) == 0 || len(de.Drifts[0].Missing) == 0 {
				t.Fatalf("Check after the drift: %v, want ErrCheckFailed naming what is missing", err)
			}
			t.Logf("Check named %d missing: %s", len(de.Drifts[0].Missing), strings.Join(de.Drifts[0].Missing, "; "))
			if d.lost {
				before := a.rules(t, nw)
				err := c.Check(ctx, a.alloc, a.w.Path, cninet.CheckOptions{Repair: true})
				if !errors.Is(err, cninet.ErrNotRepairable) || !errors.Is(err, cninet.ErrCheckFailed) {
					t.Fatalf("Repair of what cannot come back in place: %v, want ErrNotRepairable", err)
				}
				if got := a.rules(t, nw); !slices.Equal(got, before) {
					t.Fatalf("a Repair refused changed the rules:\n  %s", strings.Join(got, "\n  "))
				}
				return
			}
			if got := b.rules(t, nw); !slices.Equal(got, wholeB) {
				// The drift took the neighbour's rules too: it is made
				// whole first, so that the sampler can see it lose one.
				if err := c.Check(ctx, b.alloc, b.w.Path, cninet.CheckOptions{Repair: true}); err != nil {
					t.Fatalf("Repair of the neighbour: %v", err)
				}
				if got := b.rules(t, nw); !slices.Equal(got, wholeB) {
					t.Fatalf("the neighbour's rules after its repair:\n  %s\nwant\n  %s", strings.Join(got, "\n  "), strings.Join(wholeB, "\n  "))
				}
			}
			neighbour := func() (int, error) { return countRulesOf(nw.cfg.NetworkName, b.alloc.ID, b.addrs) }
			var repairErr error
			sampleWhile(t, "the neighbour's rules while the workload is repaired", len(wholeB), neighbour, func() {
				repairErr = c.Check(ctx, a.alloc, a.w.Path, cninet.CheckOptions{Repair: true})
			})
			if repairErr != nil {
				t.Fatalf("Repair: %v", repairErr)
			}
			if got := a.rules(t, nw); !slices.Equal(got, whole) {
				t.Fatalf("after the repair the workload's rules are\n  %s\nwant, as the plugins wrote them,\n  %s",
					strings.Join(got, "\n  "), strings.Join(whole, "\n  "))
			}
			a.assertServed(t, nw, "after the repair")
			if err := c.Check(ctx, a.alloc, a.w.Path, cninet.CheckOptions{Repair: true}); err != nil {
				t.Fatalf("a second Repair: %v", err)
			}
			if got := a.rules(t, nw); !slices.Equal(got, whole) {
				t.Fatalf("a second Repair changed the rules: %s", strings.Join(got, "\n  "))
			}
			if err := c.Check(ctx, b.alloc, b.w.Path, cninet.CheckOptions{Repair: true}); err != nil {
				t.Fatalf("Repair of the whole neighbour: %v", err)
			}
			if got := b.rules(t, nw); !slices.Equal(got, wholeB) {
				t.Fatalf("the neighbour's rules after a repair of it whole: %s", strings.Join(got, "\n  "))
			}
			b.assertServed(t, nw, "after the workload's repair")
		})
	}
	a.tearDown(t, c)
	b.tearDown(t, c)
}

// hostVeth is the host's end of id's veth, as its cached result names
// it: the interface outside any sandbox that is not the bridge.
func hostVeth(t *testing.T, c *cninet.Configurator, nw network, id string) string {
	t.Helper()
	res, err := c.CachedResult(id, nw.cfg.NetworkName, "eth0")
	if err != nil || res == nil {
		t.Fatalf("cached result of %s: %v, %v", id, res, err)
	}
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		t.Fatal(err)
	}
	for _, intf := range r.Interfaces {
		if intf != nil && intf.Sandbox == "" && intf.Name != nw.cfg.BridgeName {
			return intf.Name
		}
	}
	t.Fatalf("the cached result of %s names no veth: %s", id, r)
	return ""
}

// ruleLines returns, sorted, the firewall rules and chains of id's
// attachment in network (see countRulesOf), without counters.
func ruleLines(t *testing.T, network, id string, addrs []netip.Addr) []string {
	t.Helper()
	lines, err := rulesOf(network, id, addrs)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(lines)
	return lines
}
