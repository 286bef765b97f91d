package footprint_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/internal/footprint"
)

// ghostCached is a stale cached result (a reboot kept libcni's cache and
// wiped host-local's tmpfs) naming what live-1 holds now.
var ghostCached = cached(nftnet1, "eth0", "ghost", "198.18.1.2", "fd00:198:18:0:1::2")

// cachedIPs reads the addresses a cached result hands a DEL, and fails
// the test if the file is not whole JSON.
func cachedIPs(t *testing.T, path string) []string {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		ContainerID string `json:"containerId"`
		Result      struct {
			IPs []struct{ Address string } `json:"ips"`
		} `json:"result"`
	}
	if err := json.Unmarshal(raw, &c); err != nil || c.ContainerID == "" {
		t.Fatalf("%s is not a whole cached result (%v): %q", path, err, raw)
	}
	var out []string
	for _, ip := range c.Result.IPs {
		out = append(out, ip.Address)
	}
	return out
}

// firewallDELByCache does what the firewall plugin's DEL does with the
// cached result libcni hands it: delete the CNI-FORWARD rules of each of
// its addresses.
func firewallDELByCache(t *testing.T, s *scenario, path string) {
	t.Helper()
	for _, addr := range cachedIPs(t, path) {
		p := netip.MustParsePrefix(addr)
		f, hostAddr := s.ipt[0], p.Addr().String()+"/32"
		if p.Addr().Is6() {
			f, hostAddr = s.ipt[1], p.Addr().String()+"/128"
		}
		for _, spec := range [][]string{
			{"-d", hostAddr, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"},
			{"-s", hostAddr, "-j", "ACCEPT"},
		} {
			_ = f.Delete("filter", "CNI-FORWARD", spec...) // a rule already gone is no error for the plugin
		}
	}
}

func withFirewall(n footprint.Network) footprint.Network {
	n.Plugins = []footprint.Plugin{{Type: "bridge"}, {Type: "firewall"}}
	return n
}

func TestPreventHandsTheDELOnlyAddressesTheAttachmentProvablyStillOwns(t *testing.T) {
	for _, tc := range []struct {
		name     string
		files    []hostFile
		id       string
		noIPAM   bool // static IPAM: no reservation directory
		firewall bool
		withheld []string
	}{
		{"an address reserved for the attachment is handed over", join(net1Dir3, crash1Reserved, []hostFile{crash1Cached}),
			"crash-1", false, true, nil},
		{"an address without the attachment's reservation is withheld (IPAM wiped by a reboot)", join([]hostFile{ghostCached}),
			"ghost", false, true, []string{"198.18.1.2", "fd00:198:18:0:1::2"}},
		{"an address another attachment holds is withheld (static IPAM)", join([]hostFile{ghostCached, live1Cached}),
			"ghost", true, true, []string{"198.18.1.2", "fd00:198:18:0:1::2"}},
		{"an address nobody else holds is handed over (static IPAM)", join([]hostFile{cached(nftnet1, "eth0", "ghost", "198.18.1.9", "fd00:198:18:0:1::9")}),
			"ghost", true, true, nil},
		{"without the firewall plugin nothing is withheld", join([]hostFile{ghostCached}),
			"ghost", false, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, "leaked-no-del", nftnet1, "eth0", tc.files)
			if tc.firewall {
				s.net = withFirewall(s.net)
			}
			if tc.noIPAM {
				s.net.IPAMDirs = nil
			}
			cache := filepath.Join(s.net.CacheDir, "results", nftnet1+"-"+tc.id+"-eth0")
			before := cachedIPs(t, cache)
			cl := footprint.NewCleaner(context.Background(), s.net, s.seams(s.nft))
			p, err := cl.Prevent([]string{tc.id})
			if err != nil {
				t.Fatal(err)
			}
			var withheld []string
			for _, a := range p.Withheld[footprint.Attachment{Network: nftnet1, ID: tc.id}] {
				withheld = append(withheld, a.String())
			}
			if !slices.Equal(withheld, tc.withheld) {
				t.Errorf("withheld %q, want %q", withheld, tc.withheld)
			}
			after := cachedIPs(t, cache)
			if len(after) != len(before)-len(tc.withheld) {
				t.Errorf("the cached result hands the DEL %q (was %q), want %d address(es) withheld", after, before, len(tc.withheld))
			}
			for _, a := range after {
				if slices.Contains(tc.withheld, strings.Split(a, "/")[0]) {
					t.Errorf("the cached result still hands the DEL %s", a)
				}
			}
			record := filepath.Join(s.net.CacheDir, "cninet", "withheld", nftnet1, tc.id)
			if _, err := os.Stat(record); (err == nil) != (len(tc.withheld) > 0) {
				t.Errorf("intent record: %v, want one only when something is withheld", err)
			}
		})
	}
}

// The reboot story, by GC and by Teardown: ghost's stale cached result
// names live-1's addresses. Its DEL never sees them, so live-1's firewall
// rules are there right after the DEL; the force cleanup leaves them too,
// and removes ghost's cache and intent record.
func TestAStaleCachedResultsDELNeverTouchesTheRulesOfTheAddressesNewHolder(t *testing.T) {
	for _, gc := range []bool{false, true} {
		t.Run(map[bool]string{false: "Teardown", true: "GC"}[gc], func(t *testing.T) {
			s := newScenario(t, "leaked-no-del", nftnet1, "eth0", join(net1Dir3, live1Reserved, crash1Reserved,
				[]hostFile{live1Cached, crash1Cached, ghostCached}))
			s.net = withFirewall(s.net)
			live := [2]string{s.ipt[0].Save("filter"), s.ipt[1].Save("filter")}
			if !strings.Contains(live[0], "198.18.1.2/32") {
				t.Fatal("the capture has no firewall rules of live-1")
			}
			ghost := footprint.Attachment{Network: nftnet1, ID: "ghost"}
			var cl *footprint.Cleaner
			var err error
			if gc {
				seams := s.seams(s.nft)
				seams.Networks = []footprint.Network{s.net}
				cl = footprint.NewSweep(context.Background(), seams)
				cl.WholeWorkload = true
				_, err = cl.PreventAll([]footprint.Attachment{ghost})
			} else {
				cl = footprint.NewCleaner(context.Background(), s.net, s.seams(s.nft))
				_, err = cl.Prevent([]string{ghost.ID})
			}
			if err != nil {
				t.Fatal(err)
			}
			cache := filepath.Join(s.net.CacheDir, "results", nftnet1+"-ghost-eth0")
			firewallDELByCache(t, s, cache)
			for i := range s.ipt {
				if got := s.ipt[i].Save("filter"); got != live[i] {
					t.Fatalf("%s filter right after ghost's DEL:\n%s\nwas:\n%s", familyLabel(i), got, live[i])
				}
			}
			if gc {
				if _, err := cl.DiscoverAll(); err != nil {
					t.Fatal(err)
				}
				err = cl.CleanAll([]footprint.Attachment{ghost})
			} else {
				_, err = cl.Clean([]string{ghost.ID})
			}
			if err != nil {
				t.Fatal(err)
			}
			for i := range s.ipt {
				if got := s.ipt[i].Save("filter"); got != live[i] {
					t.Errorf("%s filter after the cleanup:\n%s\nwas:\n%s", familyLabel(i), got, live[i])
				}
			}
			for _, f := range s.files(t) {
				if strings.Contains(f, "ghost") {
					t.Errorf("left %s", f)
				}
			}
		})
	}
}

// A process killed at any step of Prevent's two writes (the intent
// record, then the cached result) leaves each file whole, old or new, and
// the next Teardown finishes: the DEL never sees the withheld addresses,
// and nothing of the attachment is left.
func TestAPreventionKilledAtAnyWriteIsFinishedByTheNextTeardown(t *testing.T) {
	steps := []string{"write", "sync", "rename", "sync dir"}
	for k := range 2 * len(steps) {
		file := map[bool]string{false: "intent record", true: "cached result"}[k >= len(steps)]
		t.Run(fmt.Sprintf("killed before %s of the %s", steps[k%len(steps)], file), func(t *testing.T) {
			s := newScenario(t, "leaked-no-del", nftnet1, "eth0", join(net1Dir3, live1Reserved, []hostFile{live1Cached, ghostCached}))
			s.net = withFirewall(s.net)
			live := s.ipt[0].Save("filter")
			cache := filepath.Join(s.net.CacheDir, "results", nftnet1+"-ghost-eth0")
			record := filepath.Join(s.net.CacheDir, "cninet", "withheld", nftnet1, "ghost")
			killed := errors.New("killed")
			n := 0
			undo := footprint.SetCrashAt(func(string) error {
				if n++; n > k {
					return killed
				}
				return nil
			})
			_, err := footprint.NewCleaner(context.Background(), s.net, s.seams(s.nft)).Prevent([]string{"ghost"})
			undo()
			if !errors.Is(err, killed) {
				t.Fatalf("Prevent = %v, want it cut short", err)
			}
			if ips := cachedIPs(t, cache); len(ips) != 2 && len(ips) != 0 {
				t.Errorf("the cached result hands the DEL %q: neither the old file nor the new", ips)
			}
			if raw, err := os.ReadFile(record); err == nil && !json.Valid(raw) {
				t.Errorf("the intent record is cut: %q", raw)
			}
			entries, err := os.ReadDir(filepath.Dir(cache))
			var names []string
			for _, e := range entries {
				names = append(names, e.Name())
			}
			if want := []string{nftnet1 + "-ghost-eth0", nftnet1 + "-live-1-eth0"}; err != nil || !slices.Equal(names, want) {
				t.Errorf("libcni's results directory holds %q (%v), want %q: libcni takes any file there for a cached attachment", names, err, want)
			}
			// The next Teardown: Prevent, the DEL as it is then, Clean.
			cl := footprint.NewCleaner(context.Background(), s.net, s.seams(s.nft))
			if _, err := cl.Prevent([]string{"ghost"}); err != nil {
				t.Fatal(err)
			}
			firewallDELByCache(t, s, cache)
			if got := s.ipt[0].Save("filter"); got != live {
				t.Fatalf("live-1's firewall rules right after the DEL:\n%s\nwant:\n%s", got, live)
			}
			if err := os.Remove(cache); err != nil { // libcni, at the end of the DEL
				t.Fatal(err)
			}
			if _, err := cl.Clean([]string{"ghost"}); err != nil {
				t.Fatal(err)
			}
			for _, f := range s.files(t) {
				if strings.Contains(f, "ghost") {
					t.Errorf("left %s", f)
				}
			}
		})
	}
}

// A runner killed after libcni removed the cached result but before the
// force cleanup leaves only the intent record: GC finds the attachment by
// it, removes the rules of the addresses it proves, then the record.
func TestGCFinishesWhatAnIntentRecordAloneProves(t *testing.T) {
	s := newScenario(t, "leaked-no-del", nftnet1, "eth0", join(net1Dir3, live1Reserved, []hostFile{live1Cached}))
	s.net = withFirewall(s.net)
	record := filepath.Join(s.net.CacheDir, "cninet", "withheld", nftnet1, "crash-1")
	if err := os.MkdirAll(filepath.Dir(record), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(record, []byte(`{"network":"nftnet1","id":"crash-1","addresses":["198.18.1.3"]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	live := s.ipt[0].Rules("filter", "CNI-FORWARD")
	seams := s.seams(s.nft)
	seams.Networks = []footprint.Network{s.net}
	sweep := footprint.NewSweep(context.Background(), seams)
	found, err := sweep.DiscoverAll()
	if err != nil {
		t.Fatal(err)
	}
	crash := footprint.Attachment{Network: nftnet1, ID: "crash-1"}
	if !slices.Contains(found, crash) {
		t.Fatalf("DiscoverAll found %v, want crash-1 by its intent record", found)
	}
	if err := sweep.CleanAll([]footprint.Attachment{crash}); err != nil {
		t.Fatal(err)
	}
	for _, r := range s.ipt[0].Rules("filter", "CNI-FORWARD") {
		if strings.Contains(r, "198.18.1.3/32") {
			t.Errorf("crash-1's firewall rule is left: %s", r)
		}
	}
	if n := len(s.ipt[0].Rules("filter", "CNI-FORWARD")); n != len(live)-2 {
		t.Errorf("CNI-FORWARD has %d rules, want %d: only crash-1's 2 removed", n, len(live)-2)
	}
	if _, err := os.Stat(record); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the intent record is left: %v", err)
	}
}

// A stale cached result names an address host-local did not reserve for
// the attachment; nobody else holds it either. The DEL never sees it,
// and the runner is killed once the DEL has removed the cached result:
// only the intent record proves the address now, and the next Teardown
// removes its firewall rules by it.
func TestTheIntentRecordAloneProvesAWithheldAddressAfterACrash(t *testing.T) {
	s := newScenario(t, "leaked-no-del", nftnet1, "eth0", join(net1Dir3, live1Reserved, []hostFile{live1Cached,
		cached(nftnet1, "eth0", "ghost", "198.18.1.9", "fd00:198:18:0:1::9")}))
	s.net = withFirewall(s.net)
	s.ipt[0].Load("filter", "-A CNI-FORWARD -d 198.18.1.9/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n-A CNI-FORWARD -s 198.18.1.9/32 -j ACCEPT")
	p, err := footprint.NewCleaner(context.Background(), s.net, s.seams(s.nft)).Prevent([]string{"ghost"})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Withheld[footprint.Attachment{Network: nftnet1, ID: "ghost"}]; len(got) != 2 {
		t.Fatalf("withheld %v, want both addresses: host-local reserved neither for ghost", got)
	}
	cache := filepath.Join(s.net.CacheDir, "results", nftnet1+"-ghost-eth0")
	firewallDELByCache(t, s, cache)
	if err := os.Remove(cache); err != nil { // libcni, at the end of the DEL; then the runner is killed
		t.Fatal(err)
	}
	teardownAfterDEL(t, s, "ghost")
	assertNoneLeft(t, s, "198.18.1.9", "ghost")
}

// teardownAfterDEL is the force cleanup of a Teardown whose DEL ran:
// Prevent (which reads what is left to prove), then Clean.
func teardownAfterDEL(t *testing.T, s *scenario, id string) {
	t.Helper()
	cl := footprint.NewCleaner(context.Background(), s.net, s.seams(s.nft))
	if _, err := cl.Prevent([]string{id}); err != nil {
		t.Fatal(err)
	}
	if _, err := cl.Clean([]string{id}); err != nil {
		t.Fatal(err)
	}
}

// assertNoneLeft fails if a CNI-FORWARD rule of addr, or a file naming
// addr or id, is left.
func assertNoneLeft(t *testing.T, s *scenario, addr, id string) {
	t.Helper()
	for _, r := range s.ipt[0].Rules("filter", "CNI-FORWARD") {
		if strings.Contains(r, addr+"/32") {
			t.Errorf("a firewall rule of %s is left: %s", addr, r)
		}
	}
	for _, f := range s.files(t) {
		if strings.Contains(f, addr) || strings.Contains(f, id) {
			t.Errorf("left %s", f)
		}
	}
}

// A cached result from before a reboot names an address another workload
// holds now; a failed ADD since reserved another one for the same id,
// and cached nothing. The prevention reads the id's reservations all the
// same, so the cleanup after the rollback's DEL removes that reservation
// and its firewall rules.
func TestAStaleCachedResultStillLetsTheAttachmentsOwnReservationBeFound(t *testing.T) {
	s := newScenario(t, "leaked-no-del", nftnet1, "eth0", join(net1Dir3, live1Reserved, []hostFile{live1Cached, ghostCached},
		reservedBoth(nftnet1, "eth0", "ghost", "198.18.1.9", "fd00:198:18:0:1::9")))
	s.net = withFirewall(s.net)
	s.ipt[0].Load("filter", "-A CNI-FORWARD -d 198.18.1.9/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n-A CNI-FORWARD -s 198.18.1.9/32 -j ACCEPT")
	teardownAfterDEL(t, s, "ghost")
	assertNoneLeft(t, s, "198.18.1.9", "ghost")
}
