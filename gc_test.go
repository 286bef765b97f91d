package cninet_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
)

func TestGCRemovesEveryDeadAttachmentAndNothingLive(t *testing.T) {
	eachListingMode(t, func(t *testing.T, whole listingMode) {
		cf := newCleanupFixture(t, "nomad", whole)
		cf.leak(t, footprint{network: "nomad", id: "live-1", ip: "198.18.0.10"})
		cf.leak(t, footprint{network: "nomad", id: "live-1", ip: "fd00:198:18::10", v6: true})
		cf.leak(t, footprint{network: "other", id: "dead-x", ip: "198.18.5.5"}) // another network's: not ours to judge
		before := cf.state()
		for i := 1; i <= 3; i++ {
			cf.leak(t, footprint{network: "nomad", id: fmt.Sprintf("dead-%d", i), ip: fmt.Sprintf("198.18.0.%d", 20+i)})
			cf.leak(t, footprint{network: "nomad", id: fmt.Sprintf("dead-%d", i), ip: fmt.Sprintf("fd00:198:18::%d", 20+i), v6: true})
		}
		report, err := cf.c.GC(context.Background(), []string{"live-1"})
		if err != nil {
			t.Fatal(err)
		}
		if after := cf.state(); after != before {
			t.Fatalf("want only the live attachment's state left\nwant:\n%s\ngot:\n%s", before, after)
		}
		if got := strings.Join(report.IDs(), ","); got != "dead-1,dead-2,dead-3" {
			t.Errorf("report IDs = %s", got)
		}
		// Per dead id and family: 2 jumps + 2 firewall rules, 2 chains; 2 reservations.
		if r, c, v := report.Count(cninet.GCRule), report.Count(cninet.GCChain), report.Count(cninet.GCReservation); r != 3*2*4 || c != 3*2*2 || v != 3*2 {
			t.Errorf("report counts rules %d chains %d reservations %d, want 24, 12, 6", r, c, v)
		}
		if names := cf.reservations(t); len(names) != 3 { // lock + live-1's two
			t.Errorf("reservations left: %v", names)
		}
		assertReportReadsTheSameEveryWay(t, report)
	})
}

// assertReportReadsTheSameEveryWay checks that a GCReport's items are the
// same whether ranged over, listed, counted or marshalled.
func assertReportReadsTheSameEveryWay(t *testing.T, report *cninet.GCReport) {
	t.Helper()
	removed := report.Removed()
	var ranged []cninet.GCItem
	for it := range report.All() {
		ranged = append(ranged, it)
	}
	if len(removed) == 0 || report.Len() != len(removed) || !slices.Equal(ranged, removed) {
		t.Errorf("Len %d, Removed %d items, All %d; want the same, and some", report.Len(), len(removed), len(ranged))
	}
	for it := range report.All() {
		if it != removed[0] {
			t.Errorf("All started with %+v, want %+v", it, removed[0])
		}
		break // stopping early must be safe
	}
	out, err := json.Marshal(report)
	var decoded struct {
		Removed []cninet.GCItem `json:"removed"`
	}
	if err != nil || json.Unmarshal(out, &decoded) != nil || !slices.Equal(decoded.Removed, removed) {
		t.Errorf("JSON %s (%v), want {\"removed\": [the items]}", out, err)
	}
}

func TestGCBatchesDeletionsPerTableAndFamily(t *testing.T) {
	cf := newCleanupFixture(t, "nomad", tableByTable)
	for i := 0; i < 50; i++ {
		cf.leak(t, footprint{network: "nomad", id: fmt.Sprintf("dead-%d", i), ip: fmt.Sprintf("198.18.0.%d", 10+i)})
		cf.leak(t, footprint{network: "nomad", id: fmt.Sprintf("dead-%d", i), ip: fmt.Sprintf("fd00:198:18::%x", 10+i), v6: true})
	}
	if _, err := cf.c.GC(context.Background(), []string{}); err != nil {
		t.Fatal(err)
	}
	// A sweep holds one family at a time: the family it searched first is
	// listed again when it is cleaned.
	for i, ipt := range []*fakes.IPTables{cf.v4, cf.v6} {
		listings, restores := 0, 0
		for _, call := range ipt.Calls() {
			switch {
			case strings.HasPrefix(call, "ListTable "):
				listings++
			case strings.HasPrefix(call, "RestoreNoFlush "):
				restores++
			}
		}
		if want := 2 * (2 - i); listings != want || restores > 2 || listings+restores != len(ipt.Calls()) {
			t.Errorf("%d iptables calls for 50 dead attachments, want %d listings (nat and filter) and at most 2 restores: %v", len(ipt.Calls()), want, ipt.Calls())
		}
		if n := len(ipt.Rules("nat", "POSTROUTING")); n != 1 {
			t.Errorf("POSTROUTING still has %d rules", n)
		}
	}
}

func TestGCFallsBackToSingleDeletesWhenTheBatchIsRefused(t *testing.T) {
	cf := newCleanupFixture(t, "nomad")
	cf.leak(t, footprint{network: "nomad", id: "dead", ip: "198.18.0.2"})
	before := cf.v4.Save("nat")
	batch := &fakes.Batching{IPTables: cf.v4, FailRestore: errors.New("iptables-restore: line 3 failed")}
	c, err := cninet.New(cninet.Config{CacheDir: t.TempDir(), StateDir: t.TempDir(), NFTables: noNFTables, ConfList: cf.c.ConfList(), CNI: cf.cni, IPTables: func(v6 bool) (host.IPTables, error) {
		if v6 {
			return cf.v6, nil
		}
		return batch, nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GC(context.Background(), []string{}); err != nil {
		t.Fatal(err)
	}
	if cf.v4.Count("RestoreNoFlush") == 0 || cf.v4.Count("Delete") == 0 {
		t.Fatalf("calls %v: want a refused batch, then single deletes", cf.v4.Calls())
	}
	if cf.v4.Save("nat") == before || len(cf.v4.Rules("nat", "POSTROUTING")) != 1 {
		t.Fatalf("dead attachment's rules still there:\n%s", cf.v4.Save("nat"))
	}
}

func TestGCRefusesANilLiveSet(t *testing.T) {
	cf := newCleanupFixture(t, "nomad")
	cf.leak(t, footprint{network: "nomad", id: "a", ip: "198.18.0.2"})
	before := cf.state()
	if _, err := cf.c.GC(context.Background(), nil); !errors.Is(err, cninet.ErrInvalidArgument) {
		t.Fatalf("err = %v, want ErrInvalidArgument", err)
	}
	if cf.state() != before {
		t.Fatal("a refused GC changed iptables")
	}
}

func TestGCHonoursDisableGC(t *testing.T) {
	cf := newCleanupFixture(t, "nomad")
	cf.leak(t, footprint{network: "nomad", id: "a", ip: "198.18.0.2"})
	before := cf.state()
	conf := strings.Replace(string(cf.c.ConfList()), `"name": "nomad",`, `"name": "nomad", "disableGC": true,`, 1)
	c, err := cninet.New(cninet.Config{CacheDir: t.TempDir(), StateDir: t.TempDir(), NFTables: noNFTables, ConfList: []byte(conf), CNI: cf.cni, IPTables: func(v6 bool) (host.IPTables, error) { return cf.v4, nil }})
	if err != nil {
		t.Fatal(err)
	}
	report, err := c.GC(context.Background(), []string{})
	if err != nil || len(report.Removed()) != 0 || cf.state() != before {
		t.Fatalf("GC with disableGC: report %+v, err %v, state changed %v", report, err, cf.state() != before)
	}
}

func TestGCWithAnAddressHandedFromOneDeadAttachmentToAnother(t *testing.T) {
	for _, tc := range []struct {
		name           string
		live           []string
		wantFirewall   int // CNI-FORWARD rules left, besides the admin jump
		wantNewHasChan bool
	}{
		{"both dead: every rule of the address goes", []string{}, 0, false},
		{"the new holder live: its rules stay, and the old rules that look the same", []string{"new"}, 4, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cf := newCleanupFixture(t, "nomad")
			old := footprint{network: "nomad", id: "old", ip: "198.18.0.2"}
			cf.v4.Load("nat", old.nat()).Load("filter", old.filter())            // its reservation went back to host-local ...
			cf.leak(t, footprint{network: "nomad", id: "new", ip: "198.18.0.2"}) // ... which gave .2 to "new"
			if _, err := cf.c.GC(context.Background(), tc.live); err != nil {
				t.Fatal(err)
			}
			if n := len(cf.v4.Rules("filter", "CNI-FORWARD")) - 1; n != tc.wantFirewall {
				t.Errorf("%d firewall rules left, want %d", n, tc.wantFirewall)
			}
			if cf.v4.HasChain("nat", chain("CNI-", "nomad", "old")) {
				t.Error("the old attachment's masquerade chain survived")
			}
			if got := cf.v4.HasChain("nat", chain("CNI-", "nomad", "new")); got != tc.wantNewHasChan {
				t.Errorf("new's masquerade chain present = %v, want %v", got, tc.wantNewHasChan)
			}
		})
	}
}

func TestGCFindsAMasqueradeChainWhoseJumpIsGone(t *testing.T) {
	cf := newCleanupFixture(t, "nomad", allTables)
	before := cf.state()
	fp := footprint{network: "nomad", id: "orphan", ip: "198.18.0.2"}
	var kept []string
	for _, line := range strings.Split(fp.nat(), "\n") {
		if !strings.HasPrefix(line, "-A POSTROUTING") && !strings.Contains(line, "CNI-DN-") && !strings.Contains(line, "HOSTPORT") {
			kept = append(kept, line) // only the masquerade chain and its rules survive
		}
	}
	cf.v4.Load("nat", strings.Join(kept, "\n"))
	report, err := cf.c.GC(context.Background(), []string{})
	if err != nil {
		t.Fatal(err)
	}
	if cf.state() != before || report.Count(cninet.GCChain) != 1 {
		t.Fatalf("orphan chain not collected (report %+v):\n%s", report, cf.state())
	}
}

// GC of a dead attachment whose cached result names an address a live
// attachment's cached result names too (static IPAM, or a reservation
// directory wiped by a reboot) leaves the live one's firewall rules.
func TestGCKeepsTheFirewallRulesOfAnAddressALiveCachedResultNames(t *testing.T) {
	eachListingMode(t, func(t *testing.T, mode listingMode) {
		cf := newCleanupFixture(t, "nomad", mode)
		dead := cf.sweepOnlyCache(t, "nomad", "dead", "198.18.0.5")
		cf.cache(t, "nomad", "live", "198.18.0.5")
		cf.v4.Load("filter", footprint{network: "nomad", ip: "198.18.0.5"}.filter())
		report, err := cf.c.GC(context.Background(), []string{"live"})
		if err != nil {
			t.Fatal(err)
		}
		if n := forwardRules(cf); n != 3 {
			t.Fatalf("CNI-FORWARD has %d rules, want the admin jump and the live attachment's 2", n)
		}
		if _, err := os.Stat(dead); !os.IsNotExist(err) {
			t.Errorf("the dead attachment's cached result is still there: %v", err)
		}
		if report.Count(cninet.GCRule) != 0 {
			t.Errorf("GC reports rules removed: %v", report.Removed())
		}
	})
}

// A reboot during ADD leaves an empty cache file (containernetworking/cni#1055).
func TestGCRemovesAnEmptyOrCutCacheFileOfADeadAttachment(t *testing.T) {
	for _, content := range []string{"", `{"kind":"cniCacheV1","containerId":"de`} {
		t.Run(fmt.Sprintf("%d bytes", len(content)), func(t *testing.T) {
			cf := newCleanupFixture(t, "nomad")
			dir := filepath.Join(cf.cacheDir, "results")
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"nomad-dead-eth0", "nomad-live-eth0", "other-dead-eth0"} {
				if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			report, err := cf.c.GC(context.Background(), []string{"live"})
			if err != nil {
				t.Fatal(err)
			}
			if report.Count(cninet.GCCachedResult) != 1 || report.IDs()[0] != "dead" {
				t.Errorf("report = %+v, want the dead attachment's cache file", report.Removed())
			}
			left, _ := os.ReadDir(dir)
			var names []string
			for _, e := range left {
				names = append(names, e.Name())
			}
			if strings.Join(names, ",") != "nomad-live-eth0,other-dead-eth0" {
				t.Errorf("cache files left: %v, want the live one's and the unknown network's", names)
			}
		})
	}
}

func TestGCSaysWhenLibcnisCacheCannotBeRead(t *testing.T) {
	cf := newCleanupFixture(t, "nomad")
	if err := os.WriteFile(filepath.Join(cf.cacheDir, "results"), nil, 0o600); err != nil { // not a directory
		t.Fatal(err)
	}
	_, err := cf.c.GC(context.Background(), []string{})
	if !errors.Is(err, cninet.ErrCleanupFailed) || !strings.Contains(err.Error(), "libcni's cache") {
		t.Fatalf("GC error = %v, want ErrCleanupFailed naming libcni's cache", err)
	}
}

func TestGCDryRunPlansWhatGCRemovesAndChangesNothing(t *testing.T) {
	cf := newCleanupFixture(t, "nomad")
	cf.setUpAs(t, cf.c, "recorded-dead") // a record of this owner's, and what its plugins left
	cf.leak(t, footprint{network: "nomad", id: "live-1", ip: "198.18.0.10"})
	cf.leak(t, footprint{network: "nomad", id: "swept-dead", ip: "198.18.0.11"})
	before, reserved := cf.state(), strings.Join(cf.reservations(t), ",")
	recs, err := cf.c.Attachments()
	if err != nil || len(recs) != 1 {
		t.Fatalf("records before: %+v, %v", recs, err)
	}
	plan, err := cf.c.GC(context.Background(), []string{"live-1"}, cninet.GCOptions{DryRun: true})
	if err != nil {
		t.Fatal(err)
	}
	if cf.state() != before || strings.Join(cf.reservations(t), ",") != reserved || attachVerbs(cf.cni) != "Setup" {
		t.Fatalf("a dry run changed the host (plugin calls %v):\n%s", cf.cni.Calls(), cf.state())
	}
	if after, _ := cf.c.Attachments(); len(after) != 1 {
		t.Fatalf("a dry run changed the registry: %+v", after)
	}
	if got := strings.Join(plan.IDs(), ","); got != "recorded-dead,swept-dead" || plan.Count(cninet.GCRecordedAttachment) != 1 || plan.Count(cninet.GCRule) == 0 {
		t.Fatalf("plan: ids %s, %d recorded attachments, %d rules; want both dead ids, the record and their rules", got, plan.Count(cninet.GCRecordedAttachment), plan.Count(cninet.GCRule))
	}
	report, err := cf.c.GC(context.Background(), []string{"live-1"})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := strings.Join(report.IDs(), ","), strings.Join(plan.IDs(), ","); got != want || cf.state() == before {
		t.Fatalf("GC removed ids %s, the plan said %s", got, want)
	}
}

// Two Configurators of one owner on one host, each knowing a network
// of its own (two task drivers of one orchestrator, say), share the host
// registry. The GC of one collects the same allocation id's dead
// attachment on its own network and leaves the other's attachment, its
// record and its rules alone: that network is not its to judge.
func TestGCOfOneConfiguratorLeavesTheNetworksOfAnotherOfTheSameOwner(t *testing.T) {
	h, configurator := sameOwnerConfigurators(t)
	cA, fakeA := configurator("net-a", "198.18.10.0/24")
	cB, fakeB := configurator("net-b", "198.18.11.0/24")
	ctx := context.Background()
	alloc := &cninet.Allocation{ID: "same-1", Ports: []cninet.Port{{Label: "http", Value: 28100, To: 8080}}}
	for _, c := range []*cninet.Configurator{cA, cB} {
		if _, err := c.Setup(ctx, alloc, "/var/run/netns/same-1"); err != nil {
			t.Fatal(err)
		}
	}
	fpA, fpB := fakeA.Footprints("same-1")[0], fakeB.Footprints("same-1")[0]
	beforeB := h.Leftovers(fpB)
	fakeA.LeakOnRemove = true // only cninet's own cleanup may remove A's state
	report, err := cA.GC(ctx, []string{})
	if err != nil {
		t.Fatal(err)
	}
	if ids := report.IDs(); !slices.Equal(ids, []string{"same-1"}) {
		t.Errorf("GC of net-a collected %v, want [same-1]", ids)
	}
	if left := h.Leftovers(fpA); len(left) > 0 {
		t.Errorf("net-a's dead attachment left %v", left)
	}
	if left := h.Leftovers(fpB); len(left) == 0 || !slices.Equal(left, beforeB) {
		t.Errorf("net-b's attachment has %v after net-a's GC, had %v", left, beforeB)
	}
	recs, err := cB.Attachments()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 1 || recs[0].Network != "net-b" || recs[0].ID != "same-1" {
		t.Errorf("the registry holds %+v, want net-b's record of same-1 alone", recs)
	}
	if err := cB.Teardown(ctx, alloc, "/var/run/netns/same-1"); err != nil {
		t.Fatal(err)
	}
	if left := h.Leftovers(fpB); len(left) > 0 {
		t.Errorf("net-b's Teardown left %v", left)
	}
}

// sameOwnerConfigurators returns a fake host and a maker of
// Configurators of the owner "runner" on it, sharing libcni's cache and
// the host registry, each knowing the one network it is given.
func sameOwnerConfigurators(t *testing.T) (*fakes.Host, func(network, subnet string) (*cninet.Configurator, *fakes.CNI)) {
	t.Helper()
	dir := t.TempDir()
	h := fakes.NewHost()
	return h, func(network, subnet string) (*cninet.Configurator, *fakes.CNI) {
		bridge := cninet.DefaultBridgeConfig()
		bridge.NetworkName, bridge.BridgeName, bridge.IPv4Subnet = network, network, subnet
		bridge.IPAMDataDir = filepath.Join(dir, "ipam")
		conf, err := cninet.BridgeConfList(bridge)
		if err != nil {
			t.Fatal(err)
		}
		fake := &fakes.CNI{Host: h, CacheDir: filepath.Join(dir, "cache")}
		c, err := cninet.New(cninet.Config{ConfList: conf, CNI: fake, IPTables: h.IPTables, NFTables: h.NFTables, Links: h.Links,
			CacheDir: fake.CacheDir, StateDir: filepath.Join(dir, "state"), Owner: "runner",
			PluginDirs: []string{filepath.Join(dir, "no-plugins")}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c, fake
	}
}

// Likewise a Teardown: it detaches the allocation from the networks its
// Configurator knows (and those the allocation names), not from another
// Configurator's network that the registry records for the same owner
// and id.
func TestTeardownOfOneConfiguratorLeavesTheNetworksOfAnotherOfTheSameOwner(t *testing.T) {
	h, configurator := sameOwnerConfigurators(t)
	cA, fakeA := configurator("net-a", "198.18.10.0/24")
	cB, fakeB := configurator("net-b", "198.18.11.0/24")
	ctx := context.Background()
	alloc := &cninet.Allocation{ID: "same-1", Ports: []cninet.Port{{Label: "http", Value: 28100, To: 8080}}}
	for _, c := range []*cninet.Configurator{cA, cB} {
		if _, err := c.Setup(ctx, alloc, "/var/run/netns/same-1"); err != nil {
			t.Fatal(err)
		}
	}
	fpA, fpB := fakeA.Footprints("same-1")[0], fakeB.Footprints("same-1")[0]
	beforeB := h.Leftovers(fpB)
	if err := cA.Teardown(ctx, alloc, "/var/run/netns/same-1"); err != nil {
		t.Fatal(err)
	}
	if left := h.Leftovers(fpA); len(left) > 0 {
		t.Errorf("net-a's Teardown left %v", left)
	}
	if left := h.Leftovers(fpB); len(left) == 0 || !slices.Equal(left, beforeB) {
		t.Errorf("net-b's attachment has %v after net-a's Teardown, had %v", left, beforeB)
	}
	if calls := fakeB.Verbs(); slices.Contains(calls, "Remove") {
		t.Errorf("net-b's CNI saw %v: net-a's Teardown ran its DEL", calls)
	}
}

// A busy host's other writer takes the xtables lock in bursts. A GC
// whose sweep missed a gap while its context still had time sweeps
// again and finishes; without a deadline, the miss is reported (the
// commands' lock waits were already bounded by host.DefaultLockWait).
func TestGCWhoseSweepMissedAGapInTheXtablesLockTriesAgainWithinItsDeadline(t *testing.T) {
	missLockGaps(t, "dead-1", func(ctx context.Context, c *cninet.Configurator, _ string) error {
		_, err := c.GC(ctx, []string{})
		return err
	})
}
