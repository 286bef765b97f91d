package cninet

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A live attachment whose files a drift took (its reservation, its
// cached result and its masquerade jump deleted) still holds its
// address: the host registry records it. A Teardown of a dead
// attachment whose stale cached result names the same address never
// takes the live one's firewall rules.
func TestAnAddressARecordHoldsKeepsItsRulesWhenADriftTookItsFiles(t *testing.T) {
	f := newWatchFixture(t, 0)
	ctx := context.Background()
	dead := &Allocation{ID: "dead-1"}
	if _, err := f.c.Setup(ctx, dead, f.netns); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(f.cni.CacheDir, "results", "w-dead-1-eth0")
	stale, err := os.ReadFile(cache)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.c.Teardown(ctx, dead, f.netns); err != nil {
		t.Fatal(err)
	}
	live := &Allocation{ID: "live-1"}
	if _, err := f.c.Setup(ctx, live, f.netns); err != nil {
		t.Fatal(err)
	}
	rec := f.c.registry.Recorded("live-1", "w", "eth0")
	if err := os.WriteFile(cache, stale, 0o600); err != nil { // dead-1's stale cache: the same address
		t.Fatal(err)
	}
	dir := f.c.seams.Network(f.c.nets.Default(), "eth0", nil).IPAMDirs[0]
	for _, p := range []string{filepath.Join(dir, rec.Addresses[0].String()), filepath.Join(f.cni.CacheDir, "results", "w-live-1-eth0")} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	for _, r := range f.host.IPv4.Rules("nat", "POSTROUTING") {
		if strings.Contains(r, "live-1") {
			f.host.IPv4.Unload("nat", r)
		}
	}
	forward := f.host.IPv4.Rules("filter", "CNI-FORWARD")
	if err := f.c.Teardown(ctx, dead, ""); err != nil {
		t.Fatal(err)
	}
	if after := f.host.IPv4.Rules("filter", "CNI-FORWARD"); len(after) != len(forward) {
		t.Fatalf("the Teardown of dead-1 took live-1's forward rules:\nbefore %q\nafter  %q", forward, after)
	}
}

// A Teardown marks the record detaching before its DEL, whatever the
// files prove: a Teardown that then fails leaves it detaching, and no
// repair brings back anything of it.
func TestATeardownThatFailsLeavesNothingForARepairToBringBack(t *testing.T) {
	f := newWatchFixture(t, 0)
	ctx := context.Background()
	alloc := &Allocation{ID: "web-1", Ports: []Port{{Value: 8080, To: 80}}}
	if _, err := f.c.Setup(ctx, alloc, f.netns); err != nil {
		t.Fatal(err)
	}
	rec := f.c.registry.Recorded("web-1", "w", "eth0")
	dir := f.c.seams.Network(f.c.nets.Default(), "eth0", nil).IPAMDirs[0]
	for _, p := range []string{filepath.Join(dir, rec.Addresses[0].String()), filepath.Join(f.cni.CacheDir, "results", "w-web-1-eth0")} {
		if err := os.Remove(p); err != nil { // nothing left to prove an address with
			t.Fatal(err)
		}
	}
	stateAtDEL := ""
	f.cni.RemoveHook = func(context.Context, string) error {
		stateAtDEL = string(f.c.registry.Recorded("web-1", "w", "eth0").State)
		for _, r := range f.host.IPv4.Rules("nat", "CNI-HOSTPORT-DNAT") {
			f.host.IPv4.Unload("nat", r) // portmap's DEL ran, the chain's next plugin failed
		}
		return errors.New("injected: firewall DEL failed")
	}
	f.host.IPv4.FailList["filter/CNI-FORWARD"] = errors.New("injected: xtables busy") // the cleanup fails too
	if err := f.c.Teardown(ctx, alloc, f.netns); err == nil {
		t.Fatal("Teardown succeeded: the test wants one that fails")
	}
	if stateAtDEL != "detaching" {
		t.Fatalf("the DEL ran while the record said %q, want detaching", stateAtDEL)
	}
	delete(f.host.IPv4.FailList, "filter/CNI-FORWARD")
	_ = f.c.Check(ctx, alloc, f.netns, CheckOptions{Repair: true})
	for _, r := range f.host.IPv4.Rules("nat", "CNI-HOSTPORT-DNAT") {
		if strings.Contains(r, "web-1") {
			t.Fatalf("a repair brought back %q of an attachment being torn down", r)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, rec.Addresses[0].String())); err == nil {
		t.Fatal("a repair wrote the reservation of an attachment being torn down")
	}
}

// A record names the libcni cache its ADD's process cached the result
// in: a drift check by a process with another cache (the CLI, looking at
// cninet daemon's attachments) looks there, not in its own.
func TestADriftCheckLooksForACachedResultWhereItsMakerCachedIt(t *testing.T) {
	f := newMultiFixture(t, quickRetry)
	alloc := &Allocation{ID: "w", NetworkNames: []string{"a"}}
	if _, err := f.c.Setup(context.Background(), alloc, "/x"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.Connect(context.Background(), alloc, "c", "/x"); err != nil {
		t.Fatal(err)
	}
	other := f
	other.cache = t.TempDir()
	drifts, err := other.configurator(t).Drifts(context.Background(), "w")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range drifts {
		for _, m := range d.Missing {
			if strings.Contains(m, "cached result") {
				t.Fatalf("%s in %s: %s, where its maker cached it in %s", d.ID, d.Network, m, f.cache)
			}
		}
	}
}
