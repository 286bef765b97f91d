package footprint_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// listHooked is an iptables family that calls onList before each whole
// table it lists.
type listHooked struct {
	*fakes.Batching
	onList func(table string)
}

func (h listHooked) ListTable(table string) ([]string, error) {
	if h.onList != nil {
		h.onList(table)
	}
	return h.Batching.ListTable(table)
}

// familySweep is a host for sweeps of network n: both iptables families
// (with a hook each), nftables, and files under a temp root.
type familySweep struct {
	s      *scenario
	onList [2]func(table string)
}

func newFamilySweep(t *testing.T, files []hostFile, nat, filter [2]string, nft ...host.NFTRule) *familySweep {
	t.Helper()
	fs := &familySweep{s: &scenario{root: t.TempDir(), nft: &fakes.NFTables{}}}
	fs.s.net = scenarioNetwork(fs.s.root, "n", "eth0")
	writeHostFiles(t, fs.s.root, files)
	for i := range fs.s.ipt {
		fs.s.ipt[i] = fakes.NewIPTables().Load("nat", nat[i]).Load("filter", filter[i])
	}
	fs.s.nft.Add(nft...)
	return fs
}

func (fs *familySweep) seams() footprint.Seams {
	return footprint.Seams{
		IPTables: func(v6 bool) (host.IPTables, error) {
			i := b2i(v6)
			return listHooked{&fakes.Batching{IPTables: fs.s.ipt[i]}, func(table string) {
				if fs.onList[i] != nil {
					fs.onList[i](table)
				}
			}}, nil
		},
		NFTables: func() (host.NFTables, error) { return fs.s.nft, nil },
		Networks: []footprint.Network{fs.s.net},
	}
}

// sweep discovers, then cleans the attachments of ids; between the two,
// onClean is installed as the listing hook.
func (fs *familySweep) sweep(t *testing.T, ids []string, onClean [2]func(table string)) {
	t.Helper()
	c := footprint.NewSweep(context.Background(), fs.seams())
	c.WholeWorkload = true
	if _, err := c.DiscoverAll(); err != nil {
		t.Fatal(err)
	}
	fs.onList = onClean
	var atts []footprint.Attachment
	for _, id := range ids {
		atts = append(atts, footprint.Attachment{Network: "n", ID: id})
	}
	if err := c.CleanAll(atts); err != nil {
		t.Fatal(err)
	}
}

// masqJump is the bridge plugin's POSTROUTING jump and chain of id on n.
func masqJump(id, prefix string) string {
	a := footprint.Attachment{Network: "n", ID: id}
	return fmt.Sprintf("-N %[1]s\n-A POSTROUTING -s %[2]s -m comment --comment %[3]q -j %[1]s\n-A %[1]s -m comment --comment %[3]q -j MASQUERADE",
		a.MasqChain(), prefix, a.MasqComment())
}

func forwardRules(prefix string) string {
	return fmt.Sprintf("-A CNI-FORWARD -d %[1]s -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n-A CNI-FORWARD -s %[1]s -j ACCEPT", prefix)
}

// A sweep lists a family again after the other is cleaned; a workload set
// up meanwhile reserved its address before its rules could be listed, and
// the files are read again after the listing: an address handed to it is
// held, and the firewall rules of that address stay.
func TestASweepJudgesAFamilyListedAgainByTheFilesReadAfterIt(t *testing.T) {
	files := []hostFile{cached("n", "eth0", "dead", "198.18.0.5", "fd00:198:18::5")}
	fs := newFamilySweep(t, files,
		[2]string{"", ""},
		[2]string{forwardRules("198.18.0.5/32"), forwardRules("fd00:198:18::5/128")})
	relisted := false
	fs.sweep(t, []string{"dead"}, [2]func(string){func(table string) {
		if relisted {
			return
		}
		relisted = true // the new workload is set up before the listing: reservation, then rules
		writeHostFiles(t, fs.s.root, []hostFile{reserved("n", "eth0", "new", "198.18.0.5")})
	}, nil})
	if !relisted {
		t.Fatal("the sweep did not list iptables again after DiscoverAll: this case is not exercised")
	}
	if got := fs.s.ipt[0].Rules("filter", "CNI-FORWARD"); len(got) != 2 {
		t.Errorf("CNI-FORWARD (iptables) = %q, want the 2 rules of 198.18.0.5, which the new workload holds", got)
	}
	if got := fs.s.ipt[1].Rules("filter", "CNI-FORWARD"); len(got) != 0 {
		t.Errorf("CNI-FORWARD (ip6tables) = %q, want the dead workload's rules gone", got)
	}
}

// Each family's listing is dropped before the next is read, yet what it
// proved stays evidence for the footprints planned in the last pass: an
// nftables rule of an address only the other family's listing proves (or
// shows held by somebody else) is judged on it.
func TestASweepKeepsTheEvidenceOfAFamilyItNoLongerHolds(t *testing.T) {
	hostport := func(id, addr string) host.NFTRule {
		return host.NFTRule{Family: "ip6", Table: "cni_hostport", Chain: "hostports", Handle: 10 + len(addr), Comment: id, DNAT: netip.MustParseAddr(addr)}
	}
	for _, tc := range []struct {
		name      string
		files     []hostFile
		nat6      string
		rule      host.NFTRule
		wantGone  bool
		wantChain string // a masquerade chain that must be gone
	}{
		{
			name:      "an address proven only by the ip6tables listing: its hostport rule goes",
			nat6:      masqJump("dead", "fd00:198:18::7/128"),
			rule:      hostport("dead", "fd00:198:18::7"),
			wantGone:  true,
			wantChain: footprint.Attachment{Network: "n", ID: "dead"}.MasqChain(),
		},
		{
			name:     "an address held by another workload per the ip6tables listing: its hostport rule stays",
			files:    []hostFile{cached("n", "eth0", "dead", "198.18.0.8", "fd00:198:18::8")},
			nat6:     masqJump("neighbour", "fd00:198:18::8/128"),
			rule:     hostport("dead", "fd00:198:18::8"),
			wantGone: false,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The iptables family holds a rule (of a workload that lives), so
			// it is listed again and cleaned last, after ip6tables' listing is
			// dropped.
			files := append([]hostFile{reserved("n", "eth0", "other", "198.18.0.9")}, tc.files...)
			fs := newFamilySweep(t, files, [2]string{"", tc.nat6}, [2]string{forwardRules("198.18.0.9/32"), ""}, tc.rule)
			ip4Listed := 0
			fs.sweep(t, []string{"dead"}, [2]func(string){func(string) { ip4Listed++ }, nil})
			if ip4Listed == 0 {
				t.Fatal("iptables was not listed again after DiscoverAll: the nftables rule was not judged without the ip6tables listing")
			}
			left := slices.ContainsFunc(fs.s.nft.Rules(), func(r host.NFTRule) bool { return r.Handle == tc.rule.Handle })
			if left == tc.wantGone {
				t.Errorf("hostport rule %v left: %v, want %v", tc.rule, left, !tc.wantGone)
			}
			if tc.wantChain != "" && fs.s.ipt[1].HasChain("nat", tc.wantChain) {
				t.Errorf("masquerade chain %s left", tc.wantChain)
			}
			if !tc.wantGone && !slices.ContainsFunc(fs.s.ipt[1].Rules("nat", "POSTROUTING"), func(r string) bool { return strings.Contains(r, "neighbour") }) {
				t.Error("the neighbour's masquerade jump is gone")
			}
		})
	}
}

// listOnlyHost is fs's host with iptables that offer List alone: a sweep
// lists chain by chain.
func (fs *familySweep) listOnlyHost() footprint.Seams {
	h := fs.seams()
	h.IPTables = func(v6 bool) (host.IPTables, error) { return fs.s.ipt[b2i(v6)], nil }
	return h
}

// A live neighbour's firewall rules are never handed to libcni's GC DEL
// of a stale attachment, even in a family where the sweep finds nothing
// else to remove.
func TestAGCDELNeverTakesANeighboursRulesInAFamilyWithNothingElse(t *testing.T) {
	files := []hostFile{
		cached("n", "eth0", "dead", "198.18.0.5", "fd00:198:18::5"), // stale: both addresses went to the neighbour
		reserved("n", "eth0", "neighbour", "198.18.0.5"),
		reserved("n", "eth0", "neighbour", "fd00:198:18::5"),
	}
	fs := newFamilySweep(t, files, [2]string{"", ""}, [2]string{"", forwardRules("fd00:198:18::5/128")})
	fs.s.net.Plugins = []footprint.Plugin{{Type: "firewall"}}
	c := footprint.NewSweep(context.Background(), fs.seams())
	dead := []footprint.Attachment{{Network: "n", ID: "dead"}}
	if _, err := c.PreventAll(dead); err != nil {
		t.Fatal(err)
	}
	handed := cachedIPs(t, filepath.Join(fs.s.net.CacheDir, "results", "n-dead-eth0"))
	for _, rule := range fs.s.ipt[1].Rules("filter", "CNI-FORWARD") { // the firewall plugin's DEL, by what the cache hands it
		for _, a := range handed {
			if strings.Contains(rule, strings.Split(a, "/")[0]+"/") {
				if err := fs.s.ipt[1].Delete("filter", "CNI-FORWARD", strings.Fields(rule)[2:]...); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	if got := fs.s.ipt[1].Rules("filter", "CNI-FORWARD"); len(got) != 2 {
		t.Fatalf("CNI-FORWARD (ip6tables) right after the DEL = %q (the cache handed it %q), want the neighbour's 2 rules", got, handed)
	}
	if _, err := c.DiscoverAll(); err != nil {
		t.Fatal(err)
	}
	if err := c.CleanAll(dead); err != nil {
		t.Fatal(err)
	}
	if got := fs.s.ipt[1].Rules("filter", "CNI-FORWARD"); len(got) != 2 {
		t.Errorf("CNI-FORWARD (ip6tables) after the sweep = %q, want the neighbour's 2 rules", got)
	}
}

// With iptables that list chain by chain, a family is always listed again:
// its listings say nothing of the chains they did not list, such as a
// masquerade chain whose jump is gone.
func TestASweepChainByChainCleansAnOrphanChainOfTheFamilyItDropped(t *testing.T) {
	dead := footprint.Attachment{Network: "n", ID: "dead"}
	orphan := fmt.Sprintf("-N %[1]s\n-A %[1]s -m comment --comment %[2]q -j MASQUERADE", dead.MasqChain(), dead.MasqComment())
	fs := newFamilySweep(t, []hostFile{cached("n", "eth0", "dead", "198.18.0.5", "fd00:198:18::5")}, [2]string{orphan, ""}, [2]string{"", ""})
	c := footprint.NewSweep(context.Background(), fs.listOnlyHost())
	if _, err := c.DiscoverAll(); err != nil {
		t.Fatal(err)
	}
	if err := c.CleanAll([]footprint.Attachment{dead}); err != nil {
		t.Fatal(err)
	}
	if fs.s.ipt[0].HasChain("nat", dead.MasqChain()) {
		t.Errorf("the orphan masquerade chain %s is left", dead.MasqChain())
	}
}

// When a family cannot be listed again, its rules were judged on nothing:
// the files that prove whose they are stay for the next sweep, and the
// sweep says so.
func TestASweepKeepsTheFilesWhenAListingFails(t *testing.T) {
	files := []hostFile{cached("n", "eth0", "dead", "198.18.0.5", "fd00:198:18::5")}
	fs := newFamilySweep(t, files, [2]string{"", ""}, [2]string{forwardRules("198.18.0.5/32"), forwardRules("fd00:198:18::5/128")})
	c := footprint.NewSweep(context.Background(), fs.listOnlyHost())
	if _, err := c.DiscoverAll(); err != nil {
		t.Fatal(err)
	}
	fs.s.ipt[0].FailList["filter/CNI-FORWARD"] = errors.New("iptables: exit status 4")
	if err := c.CleanAll([]footprint.Attachment{{Network: "n", ID: "dead"}}); err == nil {
		t.Error("CleanAll = nil, want the failed listing")
	}
	if got := fs.s.ipt[0].Rules("filter", "CNI-FORWARD"); len(got) != 2 {
		t.Errorf("CNI-FORWARD (iptables) = %q, want its 2 rules: they were never judged", got)
	}
	if left := fs.s.files(t); !slices.Contains(left, files[0].path) {
		t.Errorf("files left %q, want the cached result that proves the rules' address", left)
	}
}

// A pass cut short by a held xtables lock ends the sweep's iptables
// passes: the next family is not listed again only to wait for the same
// lock, and the files stay for the next sweep.
func TestASweepStopsAtAHeldXtablesLock(t *testing.T) {
	files := []hostFile{cached("n", "eth0", "dead", "198.18.0.5", "fd00:198:18::5")}
	fs := newFamilySweep(t, files, [2]string{"", ""}, [2]string{forwardRules("198.18.0.5/32"), forwardRules("fd00:198:18::5/128")})
	c := footprint.NewSweep(context.Background(), fs.listOnlyHost())
	if _, err := c.DiscoverAll(); err != nil {
		t.Fatal(err)
	}
	listedBefore := fs.s.ipt[0].Count("List ")
	fs.s.ipt[1].FailDelete["filter/CNI-FORWARD"] = fmt.Errorf("%w: another app holds it", host.ErrXtablesLock)
	if err := c.CleanAll([]footprint.Attachment{{Network: "n", ID: "dead"}}); !errors.Is(err, host.ErrXtablesLock) {
		t.Errorf("CleanAll = %v, want the held lock", err)
	}
	if n := fs.s.ipt[0].Count("List ") - listedBefore; n != 0 {
		t.Errorf("iptables was listed %d more times after ip6tables' pass was cut short", n)
	}
	if left := fs.s.files(t); !slices.Contains(left, files[0].path) {
		t.Errorf("files left %q, want the cached result: the rules it proves are still there", left)
	}
}
