package cninet_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/fakeipt"
)

// cache writes libcni's cached result of (network, id) on eth0 naming ip.
func (cf cleanupFixture) cache(t *testing.T, network, id, ip string) string {
	t.Helper()
	return cf.writeCache(t, network, id, ip, "cniCacheV1")
}

// sweepOnlyCache writes a cached result that libcni's own GC passes over
// (its kind is not libcni's): unit tests have no plugins for its DEL to
// run, and what is under test is the sweep.
func (cf cleanupFixture) sweepOnlyCache(t *testing.T, network, id, ip string) string {
	t.Helper()
	return cf.writeCache(t, network, id, ip, "")
}

func (cf cleanupFixture) writeCache(t *testing.T, network, id, ip, kind string) string {
	t.Helper()
	raw, err := json.Marshal(map[string]any{
		"kind": kind, "containerId": id, "networkName": network, "ifName": "eth0",
		"config": []byte(`{}`),
		"result": map[string]any{"cniVersion": "1.0.0", "ips": []map[string]string{{"address": ip + "/24"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(cf.cacheDir, "results", network+"-"+id+"-eth0")
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// firewallDEL makes the fake's DEL do what the firewall plugin's does:
// delete the CNI-FORWARD rules of every address the cached result names
// when the DEL runs (libcni hands it over as prevResult). after, if set,
// runs right after those deletions, before anything else can repair them.
func (cf cleanupFixture) firewallDEL(t *testing.T, after func()) {
	cf.cni.RemoveHook = func(_ context.Context, id string) error {
		raw, err := os.ReadFile(filepath.Join(cf.cacheDir, "results", cf.network+"-"+id+"-eth0"))
		if err != nil {
			return err
		}
		var cached struct {
			Result struct {
				IPs []struct{ Address string } `json:"ips"`
			} `json:"result"`
		}
		if err := json.Unmarshal(raw, &cached); err != nil {
			return err
		}
		defer func() {
			if after != nil {
				after()
			}
		}()
		for _, c := range cached.Result.IPs {
			ip, _, _ := strings.Cut(c.Address, "/")
			fp := footprint{network: cf.network, ip: ip}
			for _, line := range strings.Split(fp.filter(), "\n") {
				spec := strings.Fields(strings.TrimPrefix(line, "-A CNI-FORWARD "))
				if err := cf.v4.Delete("filter", "CNI-FORWARD", spec...); err != nil {
					var fe *fakeipt.Error
					if !errors.As(err, &fe) || !fe.NotExist {
						return err
					}
				}
			}
		}
		return nil
	}
}

func forwardRules(cf cleanupFixture) int { return len(cf.v4.Rules("filter", "CNI-FORWARD")) }

// A reboot wiped host-local's reservations (tmpfs) but kept libcni's
// cache (disk); a new workload was given the old one's address. The
// firewall plugin's DEL of the old attachment deletes by the addresses of
// the cached result: it must never see that one, so the new workload's
// rules are there at every instant, right after the DEL too.
func TestTeardownOfAStaleAttachmentNeverTouchesTheFirewallRulesOfTheAddressesNewHolder(t *testing.T) {
	for _, tc := range []struct {
		name   string
		holder func(t *testing.T, cf cleanupFixture)
	}{
		{"the new holder has host-local's reservation", func(t *testing.T, cf cleanupFixture) { cf.reserve(t, "198.18.0.2", "new") }},
		{"the new holder has a cached result (static IPAM)", func(t *testing.T, cf cleanupFixture) { cf.cache(t, "nomad", "new", "198.18.0.2") }},
		{"the new holder has a masquerade rule", func(t *testing.T, cf cleanupFixture) {
			cf.v4.Load("nat", footprint{network: "nomad", id: "new", ip: "198.18.0.2"}.nat())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			eachListingMode(t, func(t *testing.T, mode listingMode) {
				cf := newCleanupFixture(t, "nomad", mode)
				cf.cache(t, "nomad", "old", "198.18.0.2") // stale: from before the reboot
				tc.holder(t, cf)
				cf.v4.Load("filter", footprint{network: "nomad", ip: "198.18.0.2"}.filter()) // the new workload's
				atDEL := -1
				cf.firewallDEL(t, func() { atDEL = forwardRules(cf) })
				if err := cf.teardown(t, "old"); err != nil {
					t.Fatal(err)
				}
				if atDEL != 3 {
					t.Errorf("right after the DEL CNI-FORWARD had %d rules, want the admin jump and the new workload's 2", atDEL)
				}
				if n := forwardRules(cf); n != 3 {
					t.Fatalf("CNI-FORWARD has %d rules, want the admin jump and the new workload's 2: %q", n, cf.v4.Rules("filter", "CNI-FORWARD"))
				}
				if _, err := os.Stat(filepath.Join(cf.cacheDir, "results", "nomad-old-eth0")); !os.IsNotExist(err) {
					t.Errorf("the old attachment's cached result is still there: %v", err)
				}
			})
		})
	}
}

// Without a holder, the rules the DEL left are the attachment's and go.
func TestTeardownRemovesTheFirewallRulesOfAnAddressNobodyElseHolds(t *testing.T) {
	cf := newCleanupFixture(t, "nomad", probed)
	cf.cache(t, "nomad", "old", "198.18.0.2")
	cf.v4.Load("filter", footprint{network: "nomad", ip: "198.18.0.2"}.filter())
	if err := cf.teardown(t, "old"); err != nil { // the fake DEL leaves them
		t.Fatal(err)
	}
	if n := forwardRules(cf); n != 1 {
		t.Fatalf("CNI-FORWARD has %d rules, want only the admin jump", n)
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

// When nftables is there but cannot be read, what portmap's nftables DEL
// would take from others is unknown: the DEL is withheld and the error
// says so; the force cleanup still runs.
func TestTeardownWithholdsTheDELWhenItsGuardCannotReadNFTables(t *testing.T) {
	cf := newCleanupFixture(t, "nomad")
	cf.leak(t, footprint{network: "nomad", id: "a", ip: "198.18.0.2"})
	broken := errors.New("netlink: permission denied")
	c, err := cninet.New(cninet.Config{CacheDir: cf.cacheDir, ConfList: cf.c.ConfList(), CNI: cf.cni,
		NFTables: func() (cninet.NFTables, error) { return nil, broken },
		IPTables: func(v6 bool) (cninet.IPTables, error) {
			if v6 {
				return cf.v6, nil
			}
			return cf.v4, nil
		}})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Teardown(context.Background(), &cninet.Allocation{ID: "a"}, "")
	if !errors.Is(err, cninet.ErrCleanupFailed) || !errors.Is(err, broken) || !strings.Contains(err.Error(), "DEL withheld") {
		t.Fatalf("Teardown error = %v, want ErrCleanupFailed saying the DEL was withheld, wrapping the cause", err)
	}
	if verbs := strings.Join(cf.cni.Verbs(), ","); strings.Contains(verbs, "Remove") {
		t.Errorf("the DEL ran: %s", verbs)
	}
	if cf.v4.HasChain("nat", chain("CNI-", "nomad", "a")) {
		t.Error("the force cleanup did not run")
	}
}

// A runner killed while libcni wrote its cache leaves the file empty; the
// reservation still proves the address, and the firewall rules the DEL
// could not find go.
func TestTeardownWithAnEmptyCacheFileStillRemovesTheFirewallRulesTheReservationProves(t *testing.T) {
	cf := newCleanupFixture(t, "nomad", probed)
	path := cf.cache(t, "nomad", "a", "198.18.0.2")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	cf.reserve(t, "198.18.0.2", "a")
	cf.v4.Load("filter", footprint{network: "nomad", ip: "198.18.0.2"}.filter())
	if err := cf.teardown(t, "a"); err != nil {
		t.Fatal(err)
	}
	if n := forwardRules(cf); n != 1 {
		t.Fatalf("CNI-FORWARD has %d rules, want only the admin jump", n)
	}
	if names := cf.reservations(t); len(names) != 1 { // lock
		t.Errorf("reservations left: %v", names)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the empty cache file is still there: %v", err)
	}
}
