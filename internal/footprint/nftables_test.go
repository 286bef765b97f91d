package footprint_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/nftables"
)

// The networks and ids of the captures in testdata/nftables (see its
// README and conf/).
const (
	nftCaptures = "../../testdata/nftables"
	nftnet1     = "nftnet1"
	nftnet2     = "nftnet2"
)

var (
	nftnet3 = "net-" + strings.Repeat("n", 60)           // the 64-character network of long-id
	longID  = "long-" + strings.Repeat("a", 110) + "-id" // 118 characters
)

// hostFile is one file of a scenario, relative to the scenario's root:
// host-local's files under ipam/<network>/, libcni's under cache/results/.
type hostFile struct{ path, data string }

// ipamDir is what host-local keeps in a network's directory besides the
// reservations.
func ipamDir(network, last4, last6 string) []hostFile {
	return []hostFile{
		{"ipam/" + network + "/lock", ""},
		{"ipam/" + network + "/last_reserved_ip.0", last4},
		{"ipam/" + network + "/last_reserved_ip.1", last6},
	}
}

// reserved is host-local's reservation of addr for id: "ID\r\nIFNAME".
func reserved(network, ifName, id, addr string) hostFile {
	return hostFile{"ipam/" + network + "/" + addr, id + "\r\n" + ifName}
}

// reservedBoth is the IPv4 and IPv6 reservations of one attachment.
func reservedBoth(network, ifName, id, v4, v6 string) []hostFile {
	return []hostFile{reserved(network, ifName, id, v4), reserved(network, ifName, id, v6)}
}

// cached is libcni's cached result of one attachment with a /24 and a /80.
func cached(network, ifName, id, v4, v6 string) hostFile {
	doc := map[string]any{
		"kind":        "cniCacheV1",
		"containerId": id,
		"ifName":      ifName,
		"networkName": network,
		"result": map[string]any{
			"cniVersion": "1.0.0",
			"ips":        []map[string]string{{"address": v4 + "/24"}, {"address": v6 + "/80"}},
		},
	}
	raw, err := json.Marshal(doc)
	if err != nil {
		panic(err)
	}
	return hostFile{"cache/results/" + network + "-" + id + "-" + ifName, string(raw)}
}

func join[T any](groups ...[]T) []T {
	var all []T
	for _, g := range groups {
		all = append(all, g...)
	}
	return all
}

func paths(files []hostFile) []string {
	var ps []string
	for _, f := range files {
		ps = append(ps, f.path)
	}
	return ps
}

// attachmentFiles is an attachment's reservations and cached result.
func attachmentFiles(network, ifName, id, v4, v6 string) []hostFile {
	return append(reservedBoth(network, ifName, id, v4, v6), cached(network, ifName, id, v4, v6))
}

// The files of the captures' attachments.
var (
	net1Dir        = ipamDir(nftnet1, "198.18.1.2", "fd00:198:18:0:1::2")
	net1Dir3       = ipamDir(nftnet1, "198.18.1.3", "fd00:198:18:0:1::3")
	net2Dir        = ipamDir(nftnet2, "198.18.2.2", "fd00:198:18:0:2::2")
	net3Dir        = ipamDir(nftnet3, "198.18.3.2", "fd00:198:18:0:3::2")
	web1Files      = attachmentFiles(nftnet1, "eth0", "web-1", "198.18.1.2", "fd00:198:18:0:1::2")
	same1Net1Files = attachmentFiles(nftnet1, "eth0", "same-1", "198.18.1.2", "fd00:198:18:0:1::2")
	same1Net2Files = attachmentFiles(nftnet2, "eth1", "same-1", "198.18.2.2", "fd00:198:18:0:2::2")
	abFiles        = attachmentFiles(nftnet1, "eth0", "ab", "198.18.1.2", "fd00:198:18:0:1::2")
	abcFiles       = attachmentFiles(nftnet1, "eth0", "abc", "198.18.1.3", "fd00:198:18:0:1::3")
	longFiles      = attachmentFiles(nftnet3, "eth0", longID, "198.18.3.2", "fd00:198:18:0:3::2")
	gone1Files     = attachmentFiles(nftnet1, "eth0", "gone-1", "198.18.1.3", "fd00:198:18:0:1::3")
	live1Reserved  = reservedBoth(nftnet1, "eth0", "live-1", "198.18.1.2", "fd00:198:18:0:1::2")
	live1Cached    = cached(nftnet1, "eth0", "live-1", "198.18.1.2", "fd00:198:18:0:1::2")
	crash1Reserved = reservedBoth(nftnet1, "eth0", "crash-1", "198.18.1.3", "fd00:198:18:0:1::3")
	crash1Cached   = cached(nftnet1, "eth0", "crash-1", "198.18.1.3", "fd00:198:18:0:1::3")
)

// The rules of one attachment in a capture, as "family chain handle"
// (handles from the capture's nft -a listing).
var (
	// single: web-1 on nftnet1.
	web1Rules = []string{
		"inet masq_checks 6",  // ip saddr 198.18.1.2 ... masquerade
		"inet masq_checks 7",  // ip6 saddr fd00:198:18:0:1::2 ... masquerade
		"ip hostports 11",     // tcp dport 28080 dnat to 198.18.1.2:8080
		"ip masquerading 12",  // ip saddr 198.18.1.2 ip daddr 198.18.1.2
		"ip masquerading 13",  // ip saddr 127.0.0.1 ip daddr 198.18.1.2
		"ip6 hostports 11",    // tcp dport 28080 dnat to [fd00:198:18:0:1::2]:8080
		"ip6 masquerading 12", // ip6 saddr = daddr fd00:198:18:0:1::2
	}
	// Captures with two attachments on nftnet1, .2 first, then .3
	// (prefix-ids: ab and abc; leaked-*: live-1 and gone-1/crash-1).
	// two-networks-same-id has the same handles: nftnet1 (.1.2) first,
	// then nftnet2 (.2.2).
	firstRules = []string{
		"inet masq_checks 6", "inet masq_checks 7",
		"ip hostports 11", "ip masquerading 12", "ip masquerading 13",
		"ip6 hostports 11", "ip6 masquerading 12",
	}
	secondMasq         = []string{"inet masq_checks 11", "inet masq_checks 12"}
	secondIPv4Hostport = []string{"ip hostports 18", "ip masquerading 19", "ip masquerading 20"}
	secondIPv6Hostport = []string{"ip6 hostports 17", "ip6 masquerading 18"}
	secondHostport     = join(secondIPv4Hostport, secondIPv6Hostport)
	// single and leaked-del-no-portmappings: portmap's rules of web-1.
	web1Hostport = web1Rules[2:]
	// long-id: the same handles, for 198.18.3.2 and fd00:198:18:0:3::2.
	longIDRules = web1Rules
)

func ruleKey(r host.NFTRule) string {
	return fmt.Sprintf("%s %s %d", r.Family, r.Chain, r.Handle)
}

func readCapture(t *testing.T, name string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(nftCaptures, name))
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// loadNFT returns a fake holding the capture's ruleset, less drop.
func loadNFT(t *testing.T, capture string, drop ...string) *fakes.NFTables {
	t.Helper()
	raw := readCapture(t, capture+".json")
	nft := &fakes.NFTables{}
	if len(drop) == 0 {
		if err := nft.Load(raw); err != nil {
			t.Fatal(err)
		}
	} else {
		rules, err := nftables.ParseListing(raw)
		if err != nil {
			t.Fatal(err)
		}
		dropped := map[string]bool{}
		for _, r := range rules {
			if slices.Contains(drop, ruleKey(r)) {
				dropped[ruleKey(r)] = true
				continue
			}
			nft.Add(r)
		}
		if len(dropped) != len(drop) {
			t.Fatalf("dropping %v from %s: only %v are there", drop, capture, dropped)
		}
	}
	seen := map[string]bool{}
	for _, r := range nft.Rules() {
		if seen[ruleKey(r)] {
			t.Fatalf("%s: two rules are %q; ruleKey cannot tell them apart", capture, ruleKey(r))
		}
		seen[ruleKey(r)] = true
	}
	return nft
}

// loadIPT returns a fake iptables (ipv6 false) or ip6tables holding the
// capture's iptables-save.
func loadIPT(t *testing.T, capture string, v6 bool) *fakes.IPTables {
	t.Helper()
	name := capture + ".iptables-save"
	if v6 {
		name = capture + ".ip6tables-save"
	}
	return fakes.NewIPTables().LoadSave(string(readCapture(t, name)))
}

// cniRules returns the rules of the plugins' tables, sorted by key.
func cniRules(rules []host.NFTRule) []host.NFTRule {
	var out []host.NFTRule
	for _, r := range rules {
		if r.Table == "cni_hostport" || r.Table == "cni_plugins_masquerade" {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return ruleKey(out[i]) < ruleKey(out[j]) })
	return out
}

func describeRules(rules []host.NFTRule) string {
	var b strings.Builder
	for _, r := range rules {
		b.WriteString("\n\t" + r.String())
	}
	return b.String()
}

// scenario is a host for one test: fake nftables and iptables and a
// temporary root holding host-local's and libcni's files.
type scenario struct {
	root string
	net  footprint.Network
	nft  *fakes.NFTables
	ipt  [2]*fakes.IPTables
}

func newScenario(t *testing.T, capture, network, ifName string, files []hostFile, drop ...string) *scenario {
	t.Helper()
	s := &scenario{
		root: t.TempDir(),
		nft:  loadNFT(t, capture, drop...),
		ipt:  [2]*fakes.IPTables{loadIPT(t, capture, false), loadIPT(t, capture, true)},
	}
	s.net = scenarioNetwork(s.root, network, ifName)
	writeHostFiles(t, s.root, files)
	return s
}

// scenarioNetwork is a network whose files are under root.
func scenarioNetwork(root, network, ifName string) footprint.Network {
	return footprint.Network{
		Name:     network,
		IfName:   ifName,
		IPAMDirs: []string{filepath.Join(root, "ipam", network)},
		CacheDir: filepath.Join(root, "cache"),
	}
}

// writeHostFiles writes files under root.
func writeHostFiles(t *testing.T, root string, files []hostFile) {
	t.Helper()
	for _, f := range files {
		p := filepath.Join(root, filepath.FromSlash(f.path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(f.data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func (s *scenario) seams(nft host.NFTables) footprint.Seams {
	return footprint.Seams{
		IPTables: func(v6 bool) (host.IPTables, error) {
			if v6 {
				return s.ipt[1], nil
			}
			return s.ipt[0], nil
		},
		NFTables: func() (host.NFTables, error) { return nft, nil },
	}
}

// probedSeams is s.host with the in-process views of the host's
// nftables and nf_tables-backed iptables.
func (s *scenario) probedSeams() footprint.Seams {
	return footprint.Seams{
		IPTables: func(v6 bool) (host.IPTables, error) {
			return fakes.NewProbing(s.ipt[b2i(v6)]), nil
		},
		NFTables: func() (host.NFTables, error) { return fakes.Matching{NFTables: s.nft}, nil },
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (s *scenario) remove(t *testing.T, files []string) {
	t.Helper()
	for _, f := range files {
		if err := os.Remove(filepath.Join(s.root, filepath.FromSlash(f))); err != nil {
			t.Fatal(err)
		}
	}
}

// files returns every file under the root, relative and sorted.
func (s *scenario) files(t *testing.T) []string {
	t.Helper()
	var found []string
	err := filepath.WalkDir(s.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(s.root, p)
		found = append(found, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(found)
	return found
}

// withoutFirewallRules returns an iptables -S listing less the firewall
// plugin's CNI-FORWARD rules of addrs.
func withoutFirewallRules(listing string, addrs []string) (string, int) {
	var kept []string
	removed := 0
	for _, line := range strings.Split(listing, "\n") {
		drop := false
		for _, a := range addrs {
			if strings.HasPrefix(line, "-A CNI-FORWARD ") && strings.Contains(line, " "+a+"/") {
				drop = true
			}
		}
		if drop {
			removed++
			continue
		}
		kept = append(kept, line)
	}
	return strings.Join(kept, "\n"), removed
}

func countKind(items []footprint.Item, kind footprint.Kind) int {
	n := 0
	for _, it := range items {
		if it.Kind == kind {
			n++
		}
	}
	return n
}

// nftCase is one scenario of the nftables backends: a capture of what
// the plugins left, the files on the host, and what Clean must remove.
type nftCase struct {
	name    string
	capture string   // testdata/nftables/<capture>.{json,iptables-save,ip6tables-save}
	drop    []string // rules taken out of the capture first, "family chain handle"
	network string
	ifName  string
	files   []hostFile

	gc       bool     // GC: Discover, then Clean; else Teardown: Remember, DEL, Clean
	delFiles []string // Teardown: the files DEL removes between Remember and Clean
	discover []string // GC: what Discover must find

	clean  []string // the ids cleaned
	gone   []string // exactly the nftables rules Clean must delete, "family chain handle"
	goneFW []string // the addresses whose firewall rules (CNI-FORWARD) Clean must delete
	kept   []string // exactly the files left afterwards
	after  string   // the capture of the plugins' own DEL, where Clean must end up the same
}

func TestCleanNFTables(t *testing.T) {
	cases := []nftCase{
		{
			name:    "teardown whose DEL removed nothing removes web-1's masquerade and hostport rules and leaves the shared chains as a DEL does",
			capture: "single",
			network: nftnet1,
			ifName:  "eth0",
			files:   join(net1Dir, web1Files),
			clean:   []string{"web-1"},
			gone:    web1Rules,
			goneFW:  []string{"198.18.1.2", "fd00:198:18:0:1::2"},
			kept:    paths(net1Dir),
			after:   "single-after-del",
		},
		{
			name:     "gc of web-1 removes what a teardown does",
			capture:  "single",
			network:  nftnet1,
			ifName:   "eth0",
			files:    join(net1Dir, web1Files),
			gc:       true,
			discover: []string{"web-1"},
			clean:    []string{"web-1"},
			gone:     web1Rules,
			goneFW:   []string{"198.18.1.2", "fd00:198:18:0:1::2"},
			kept:     paths(net1Dir),
			after:    "single-after-del",
		},
		{
			name:    "teardown of same-1 on nftnet1 leaves the rules of same-1 on nftnet2",
			capture: "two-networks-same-id",
			network: nftnet1,
			ifName:  "eth0",
			files:   join(net1Dir, net2Dir, same1Net1Files, same1Net2Files),
			clean:   []string{"same-1"},
			gone:    firstRules,
			goneFW:  []string{"198.18.1.2", "fd00:198:18:0:1::2"},
			kept:    join(paths(net1Dir), paths(net2Dir), paths(same1Net2Files)),
		},
		{
			name:    "teardown of same-1 on nftnet2 leaves the rules of same-1 on nftnet1",
			capture: "two-networks-same-id",
			network: nftnet2,
			ifName:  "eth1",
			files:   join(net1Dir, net2Dir, same1Net1Files, same1Net2Files),
			clean:   []string{"same-1"},
			gone:    join(secondMasq, secondHostport),
			goneFW:  []string{"198.18.2.2", "fd00:198:18:0:2::2"},
			kept:    join(paths(net1Dir), paths(net2Dir), paths(same1Net1Files)),
		},
		{
			name:     "gc of same-1 on nftnet1 leaves the rules of same-1 on nftnet2",
			capture:  "two-networks-same-id",
			network:  nftnet1,
			ifName:   "eth0",
			files:    join(net1Dir, net2Dir, same1Net1Files, same1Net2Files),
			gc:       true,
			discover: []string{"same-1"},
			clean:    []string{"same-1"},
			gone:     firstRules,
			goneFW:   []string{"198.18.1.2", "fd00:198:18:0:1::2"},
			kept:     join(paths(net1Dir), paths(net2Dir), paths(same1Net2Files)),
		},
		{
			name:    "a hostport rule naming the id is kept when nothing proves its address was this network's",
			capture: "two-networks-same-id",
			network: nftnet1,
			ifName:  "eth0",
			drop:    secondMasq, // nothing left says 198.18.2.2 is anybody's
			files:   join(net1Dir, same1Net1Files),
			clean:   []string{"same-1"},
			gone:    firstRules,
			goneFW:  []string{"198.18.1.2", "fd00:198:18:0:1::2"},
			kept:    paths(net1Dir),
		},
		{
			name:     "gc keeps a hostport rule naming the id when nothing proves its address was this network's",
			capture:  "two-networks-same-id",
			network:  nftnet1,
			ifName:   "eth0",
			drop:     secondMasq,
			files:    join(net1Dir, same1Net1Files),
			gc:       true,
			discover: []string{"same-1"},
			clean:    []string{"same-1"},
			gone:     firstRules,
			goneFW:   []string{"198.18.1.2", "fd00:198:18:0:1::2"},
			kept:     paths(net1Dir),
		},
		{
			name:    "teardown of ab leaves every rule of abc, as the plugins' DEL does",
			capture: "prefix-ids",
			network: nftnet1,
			ifName:  "eth0",
			files:   join(net1Dir3, abFiles, abcFiles),
			clean:   []string{"ab"},
			gone:    firstRules,
			goneFW:  []string{"198.18.1.2", "fd00:198:18:0:1::2"},
			kept:    join(paths(net1Dir3), paths(abcFiles)),
			after:   "prefix-ids-after-del-ab",
		},
		{
			name:     "gc of ab leaves every rule of abc",
			capture:  "prefix-ids",
			network:  nftnet1,
			ifName:   "eth0",
			files:    join(net1Dir3, abFiles, abcFiles),
			gc:       true,
			discover: []string{"ab", "abc"},
			clean:    []string{"ab"},
			gone:     firstRules,
			goneFW:   []string{"198.18.1.2", "fd00:198:18:0:1::2"},
			kept:     join(paths(net1Dir3), paths(abcFiles)),
			after:    "prefix-ids-after-del-ab",
		},
		{
			name:    "teardown of an id whose masquerade comment nft cut at 128 bytes removes its rules",
			capture: "long-id",
			network: nftnet3,
			ifName:  "eth0",
			files:   join(net3Dir, longFiles),
			clean:   []string{longID},
			gone:    longIDRules,
			goneFW:  []string{"198.18.3.2", "fd00:198:18:0:3::2"},
			kept:    paths(net3Dir),
		},
		{
			name:     "gc finds an id whose masquerade comment nft cut in its files and removes its rules",
			capture:  "long-id",
			network:  nftnet3,
			ifName:   "eth0",
			files:    join(net3Dir, longFiles),
			gc:       true,
			discover: []string{longID},
			clean:    []string{longID},
			gone:     longIDRules,
			goneFW:   []string{"198.18.3.2", "fd00:198:18:0:3::2"},
			kept:     paths(net3Dir),
		},
		{
			name:     "teardown after the namespace was deleted removes the masquerade rules its DEL skipped",
			capture:  "leaked-ns-deleted",
			network:  nftnet1,
			ifName:   "eth0",
			files:    join(net1Dir3, live1Reserved, []hostFile{live1Cached}, gone1Files),
			delFiles: paths(gone1Files), // DEL freed the addresses and libcni dropped the cache
			clean:    []string{"gone-1"},
			gone:     secondMasq,
			kept:     join(paths(net1Dir3), paths(live1Reserved), []string{live1Cached.path}),
		},
		{
			name:    "cleanup of gone-1 with no file left removes its masquerade rules by their comment and leaves live-1's",
			capture: "leaked-ns-deleted",
			network: nftnet1,
			ifName:  "eth0",
			files:   join(net1Dir3, live1Reserved, []hostFile{live1Cached}),
			clean:   []string{"gone-1"},
			gone:    secondMasq,
			kept:    join(paths(net1Dir3), paths(live1Reserved), []string{live1Cached.path}),
		},
		{
			name:     "gc finds gone-1 by its masquerade comment and removes its rules, leaving live-1's",
			capture:  "leaked-ns-deleted",
			network:  nftnet1,
			ifName:   "eth0",
			files:    join(net1Dir3, live1Reserved, []hostFile{live1Cached}),
			gc:       true,
			discover: []string{"gone-1", "live-1"},
			clean:    []string{"gone-1"},
			gone:     secondMasq,
			kept:     join(paths(net1Dir3), paths(live1Reserved), []string{live1Cached.path}),
		},
		{
			name:     "gc with reservations and no cached results removes everything of crash-1 and leaves live-1 alone",
			capture:  "leaked-no-del",
			network:  nftnet1,
			ifName:   "eth0",
			files:    join(net1Dir3, live1Reserved, crash1Reserved),
			gc:       true,
			discover: []string{"crash-1", "live-1"},
			clean:    []string{"crash-1"},
			gone:     join(secondMasq, secondHostport),
			goneFW:   []string{"198.18.1.3", "fd00:198:18:0:1::3"},
			kept:     join(paths(net1Dir3), paths(live1Reserved)),
		},
		{
			name:     "gc with no files at all proves crash-1's addresses by its masquerade rules",
			capture:  "leaked-no-del",
			network:  nftnet1,
			ifName:   "eth0",
			gc:       true,
			discover: []string{"crash-1", "live-1"},
			clean:    []string{"crash-1"},
			gone:     join(secondMasq, secondHostport),
			goneFW:   []string{"198.18.1.3", "fd00:198:18:0:1::3"},
		},
		{
			name:     "gc with the files as captured removes crash-1's reservations and cached result too",
			capture:  "leaked-no-del",
			network:  nftnet1,
			ifName:   "eth0",
			files:    join(net1Dir3, live1Reserved, crash1Reserved, []hostFile{live1Cached, crash1Cached}),
			gc:       true,
			discover: []string{"crash-1", "live-1"},
			clean:    []string{"crash-1"},
			gone:     join(secondMasq, secondHostport),
			goneFW:   []string{"198.18.1.3", "fd00:198:18:0:1::3"},
			kept:     join(paths(net1Dir3), paths(live1Reserved), []string{live1Cached.path}),
		},
		{
			name:    "gc leaves crash-1's IPv4 hostport rules once host-local handed the address to new-1",
			capture: "leaked-no-del",
			network: nftnet1,
			ifName:  "eth0",
			files: join(net1Dir3, live1Reserved, []hostFile{
				reserved(nftnet1, "eth0", "new-1", "198.18.1.3"),
				reserved(nftnet1, "eth0", "crash-1", "fd00:198:18:0:1::3"),
			}),
			gc:       true,
			discover: []string{"crash-1", "live-1", "new-1"},
			clean:    []string{"crash-1"},
			gone:     join(secondMasq, secondIPv6Hostport),
			goneFW:   []string{"fd00:198:18:0:1::3"},
			kept:     join(paths(net1Dir3), paths(live1Reserved), []string{"ipam/" + nftnet1 + "/198.18.1.3"}),
		},
		{
			name:    "teardown leaves crash-1's IPv4 hostport rules once host-local handed the address to new-1",
			capture: "leaked-no-del",
			network: nftnet1,
			ifName:  "eth0",
			files: join(net1Dir3, live1Reserved, []hostFile{
				reserved(nftnet1, "eth0", "new-1", "198.18.1.3"),
				reserved(nftnet1, "eth0", "crash-1", "fd00:198:18:0:1::3"),
			}),
			clean:  []string{"crash-1"},
			gone:   join(secondMasq, secondIPv6Hostport),
			goneFW: []string{"fd00:198:18:0:1::3"},
			kept:   join(paths(net1Dir3), paths(live1Reserved), []string{"ipam/" + nftnet1 + "/198.18.1.3"}),
		},
		{
			name:     "teardown removes the portmap rules a DEL without portMappings left, proven by the reservations read before DEL",
			capture:  "leaked-del-no-portmappings",
			network:  nftnet1,
			ifName:   "eth0",
			files:    join(net1Dir, web1Files),
			delFiles: paths(web1Files),
			clean:    []string{"web-1"},
			gone:     web1Hostport,
			kept:     paths(net1Dir),
			after:    "single-after-del",
		},
		{
			name:    "portmap rules whose address nothing proves any more are left alone",
			capture: "leaked-del-no-portmappings",
			network: nftnet1,
			ifName:  "eth0",
			files:   net1Dir,
			clean:   []string{"web-1"},
			kept:    paths(net1Dir),
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Run("listed", func(t *testing.T) { tc.run(t, false, false) })
			t.Run("sketched and probed first", func(t *testing.T) { tc.run(t, true, false) })
			t.Run("sketched, probed first, what Prevent saw looked up by handle", func(t *testing.T) { tc.run(t, true, true) })
		})
	}
}

// run runs the case; probed gives the cleaner the in-process views the
// host's nftables and nf_tables-backed iptables offer (NFTRuleMatcher,
// NFTRuleLookup, ChainProber, AddrScanner), and recheck lets Clean look
// up what Prevent saw (Cleaner.RecheckByHandle): both must change what it
// reads, never what it removes.
func (tc nftCase) run(t *testing.T, probed, recheck bool) {
	s := newScenario(t, tc.capture, tc.network, tc.ifName, tc.files, tc.drop...)
	before := s.nft.Rules()
	byKey := map[string]host.NFTRule{}
	for _, r := range before {
		byKey[ruleKey(r)] = r
	}
	gone := map[string]bool{}
	deletes := map[string]int{} // expected rules per DeleteRules call, by table
	for _, k := range tc.gone {
		r, ok := byKey[k]
		if !ok {
			t.Fatalf("case lists %q as gone, but %s has no such rule", k, tc.capture)
		}
		gone[k] = true
		deletes[r.Family+" "+r.Table]++
	}
	var iptBefore [2]map[string]string
	for i, ipt := range s.ipt {
		iptBefore[i] = map[string]string{"nat": ipt.Save("nat"), "filter": ipt.Save("filter")}
	}

	s.net.HostportNFT = recheck // what Prevent sees is kept when it judges portmap's nftables DEL
	seams := s.seams(s.nft)
	if probed {
		seams = s.probedSeams()
	}
	cl := footprint.NewCleaner(context.Background(), s.net, seams)
	cl.RecheckByHandle = recheck
	if tc.gc {
		if got, err := cl.Discover(); err != nil || !slices.Equal(got, tc.discover) {
			t.Errorf("Discover() = %q, want %q", got, tc.discover)
		}
	}
	prevented := 0 // calls before Clean's: a GC's Discover lists for Clean too
	if !tc.gc {
		cl.Prevent(tc.clean)
		s.remove(t, tc.delFiles)
		prevented = len(s.nft.Calls())
	}
	items, err := cl.Clean(tc.clean)
	if err != nil {
		t.Fatalf("Clean: %v", err)
	}

	// nftables: exactly the listed rules are gone, everything else is as
	// it was, handle, comment and addresses alike.
	var want []host.NFTRule
	for _, r := range before {
		if !gone[ruleKey(r)] {
			want = append(want, r)
		}
	}
	if got := s.nft.Rules(); !slices.EqualFunc(got, want, sameNFTRule) {
		t.Errorf("nftables rules left:%s\nwant:%s", describeRules(got), describeRules(want))
	}
	if tc.after != "" {
		after := loadNFT(t, tc.after)
		if got, want := cniRules(s.nft.Rules()), cniRules(after.Rules()); !slices.EqualFunc(got, want, sameNFTRule) {
			t.Errorf("plugins' tables differ from %s (what their own DEL leaves):%s\nwant:%s", tc.after, describeRules(got), describeRules(want))
		}
	}

	// Clean's calls: one listing, and one transaction per table that had
	// rules to delete.
	wantCalls := []string{"ListRules"}
	var tables []string
	for table := range deletes {
		tables = append(tables, table)
	}
	sort.Strings(tables)
	for _, table := range tables {
		wantCalls = append(wantCalls, fmt.Sprintf("DeleteRules %s %d", table, deletes[table]))
	}
	got := s.nft.Calls()[prevented:]
	if probed {
		// A Teardown looks in-process first and lists only when something may be
		// its own; a GC always lists.
		got = slices.DeleteFunc(got, func(c string) bool { return c == "AnyRule" || strings.HasPrefix(c, "LookupRule ") })
		if !tc.gc && len(tc.gone) == 0 && !slices.Contains(got, "ListRules") {
			wantCalls = wantCalls[1:]
		}
	}
	if !slices.Equal(got, wantCalls) {
		t.Errorf("nftables calls = %q, want %q", got, wantCalls)
	}

	// iptables: the firewall plugin's rules of goneFW, nothing else.
	firewallRemoved := 0
	for i, ipt := range s.ipt {
		wantFilter, n := withoutFirewallRules(iptBefore[i]["filter"], tc.goneFW)
		firewallRemoved += n
		if got := ipt.Save("filter"); got != wantFilter {
			t.Errorf("%s filter left:\n%s\nwant:\n%s", familyLabel(i), got, wantFilter)
		}
		if got := ipt.Save("nat"); got != iptBefore[i]["nat"] {
			t.Errorf("%s nat changed:\n%s\nwas:\n%s", familyLabel(i), got, iptBefore[i]["nat"])
		}
		if tc.after != "" {
			if want := loadIPT(t, tc.after, i == 1).Save("filter"); ipt.Save("filter") != want {
				t.Errorf("%s filter differs from %s:\n%s\nwant:\n%s", familyLabel(i), tc.after, ipt.Save("filter"), want)
			}
		}
	}
	if len(tc.goneFW) > 0 && firewallRemoved == 0 {
		t.Fatalf("case lists firewall rules of %v as gone, but %s has none", tc.goneFW, tc.capture)
	}

	// Files: exactly kept are left.
	kept := append([]string(nil), tc.kept...)
	sort.Strings(kept)
	if got := s.files(t); !slices.Equal(got, kept) {
		t.Errorf("files left = %q, want %q", got, kept)
	}

	// What Clean reports: every removal, each under a cleaned id.
	filesRemoved := len(tc.files) - len(tc.delFiles) - len(tc.kept)
	for _, c := range []struct {
		kind footprint.Kind
		want int
	}{
		{footprint.KindNFTRule, len(tc.gone)},
		{footprint.KindRule, firewallRemoved},
		{footprint.KindChain, 0},
	} {
		if got := countKind(items, c.kind); got != c.want {
			t.Errorf("Clean reported %d items of kind %q, want %d", got, c.kind, c.want)
		}
	}
	if got := countKind(items, footprint.KindReservation) + countKind(items, footprint.KindCachedResult); got != filesRemoved {
		t.Errorf("Clean reported %d files removed, want %d", got, filesRemoved)
	}
	for _, it := range items {
		if !slices.Contains(tc.clean, it.ID) {
			t.Errorf("Clean reported %s %q under id %q, which is none of the cleaned ids %q", it.Kind, it.Detail, it.ID, tc.clean)
		}
	}
}

func familyLabel(i int) string {
	if i == 1 {
		return "ip6tables"
	}
	return "iptables"
}

// singleScenario is web-1 on nftnet1 (capture single) with its
// reservations and cached result, about to be torn down.
func singleScenario(t *testing.T) *scenario {
	return newScenario(t, "single", nftnet1, "eth0", join(net1Dir, web1Files))
}

// assertFilesAndFirewallCleaned checks what Clean of web-1 must do
// whatever nftables says: its files and firewall rules are gone.
func assertFilesAndFirewallCleaned(t *testing.T, s *scenario) {
	t.Helper()
	want := paths(net1Dir)
	sort.Strings(want)
	if got := s.files(t); !slices.Equal(got, want) {
		t.Errorf("files left = %q, want %q", got, want)
	}
	for i, ipt := range s.ipt {
		if got, want := ipt.Save("filter"), loadIPT(t, "single-after-del", i == 1).Save("filter"); got != want {
			t.Errorf("%s filter left:\n%s\nwant:\n%s", familyLabel(i), got, want)
		}
	}
}

func TestCleanOnAHostWithoutNFTablesCleansTheRestAndIsNoFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		open func() (host.NFTables, error)
	}{
		{"NFTables says nft is missing", func() (host.NFTables, error) {
			return nil, fmt.Errorf("opening nftables: %w: exec: \"nft\": executable file not found in $PATH", host.ErrNFTablesMissing)
		}},
		{"no NFTables at all", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := singleScenario(t)
			seams := s.seams(nil)
			seams.NFTables = tc.open
			cl := footprint.NewCleaner(context.Background(), s.net, seams)
			cl.Prevent([]string{"web-1"})
			items, err := cl.Clean([]string{"web-1"})
			if err != nil {
				t.Fatalf("Clean: %v, want no error", err)
			}
			assertFilesAndFirewallCleaned(t, s)
			if n := countKind(items, footprint.KindNFTRule); n != 0 {
				t.Errorf("reported %d nftables rules removed without nftables", n)
			}
			if n := countKind(items, footprint.KindReservation); n != 2 {
				t.Errorf("reported %d reservations removed, want 2", n)
			}
		})
	}
}

func TestCleanWhenNFTablesCannotBeListedDeletesNoNFTRuleAndSaysSo(t *testing.T) {
	s := singleScenario(t)
	s.nft.FailList = errors.New("netlink: Error: Could not process rule: Operation not permitted")
	before := s.nft.Rules()
	cl := footprint.NewCleaner(context.Background(), s.net, s.seams(s.nft))
	cl.Prevent([]string{"web-1"})
	items, err := cl.Clean([]string{"web-1"})
	if err == nil || !strings.Contains(err.Error(), "nftables") || !strings.Contains(err.Error(), "Operation not permitted") {
		t.Fatalf("Clean error = %v, want one about listing nftables", err)
	}
	if got, want := s.nft.Calls(), []string{"ListRules"}; !slices.Equal(got, want) {
		t.Errorf("nftables calls = %q, want %q: nothing is deleted blind", got, want)
	}
	if got := s.nft.Rules(); !slices.EqualFunc(got, before, sameNFTRule) {
		t.Errorf("nftables rules changed:%s", describeRules(got))
	}
	if n := countKind(items, footprint.KindNFTRule); n != 0 {
		t.Errorf("reported %d nftables rules removed", n)
	}
	assertFilesAndFirewallCleaned(t, s) // every step runs even when another fails
}

func TestCleanWhenNFTablesRefusesEveryDeletionReportsEachRule(t *testing.T) {
	s := singleScenario(t)
	s.nft.FailDelete = errors.New("Error: Could not process rule: Operation not permitted")
	before := s.nft.Rules()
	cl := footprint.NewCleaner(context.Background(), s.net, s.seams(s.nft))
	cl.Prevent([]string{"web-1"})
	items, err := cl.Clean([]string{"web-1"})
	if err == nil || !strings.Contains(err.Error(), "nftables: deleting") {
		t.Fatalf("Clean error = %v, want one about deleting nftables rules", err)
	}
	for _, handle := range []string{"handle 6", "handle 7", "handle 11", "handle 12", "handle 13"} {
		if !strings.Contains(err.Error(), handle) {
			t.Errorf("Clean error does not name the rule with %s:\n%v", handle, err)
		}
	}
	if got := s.nft.Rules(); !slices.EqualFunc(got, before, sameNFTRule) {
		t.Errorf("nftables rules changed:%s", describeRules(got))
	}
	if n := countKind(items, footprint.KindNFTRule); n != 0 {
		t.Errorf("reported %d nftables rules removed, though none was", n)
	}
	assertFilesAndFirewallCleaned(t, s)
}

func TestCleanDeletesEachTablesRulesInOneTransaction(t *testing.T) {
	s := singleScenario(t)
	cl := footprint.NewCleaner(context.Background(), s.net, s.seams(s.nft))
	cl.Prevent([]string{"web-1"})
	if _, err := cl.Clean([]string{"web-1"}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"ListRules",
		"DeleteRules inet cni_plugins_masquerade 2",
		"DeleteRules ip cni_hostport 3",
		"DeleteRules ip6 cni_hostport 2",
	}
	if got := s.nft.Calls(); !slices.Equal(got, want) {
		t.Errorf("nftables calls = %q, want %q", got, want)
	}
}

// flakyNFT passes everything to a fake, except that the first
// DeleteRules call goes to first instead.
type flakyNFT struct {
	*fakes.NFTables
	first func(ctx context.Context, nft *fakes.NFTables, table host.NFTable, rules []host.NFTRule) error

	mu      sync.Mutex
	deletes []string
}

func (f *flakyNFT) DeleteRules(ctx context.Context, table host.NFTable, rules []host.NFTRule) error {
	f.mu.Lock()
	n := len(f.deletes)
	f.deletes = append(f.deletes, fmt.Sprintf("%s %d", table, len(rules)))
	f.mu.Unlock()
	if n == 0 {
		return f.first(ctx, f.NFTables, table, rules)
	}
	return f.NFTables.DeleteRules(ctx, table, rules)
}

func TestCleanFallsBackToOneRuleAtATimeWhenATransactionFails(t *testing.T) {
	for _, tc := range []struct {
		name     string
		vanished int
		first    func(ctx context.Context, nft *fakes.NFTables, table host.NFTable, rules []host.NFTRule) error
	}{
		{
			name:     "a handle of the batch vanished meanwhile",
			vanished: 1, // removed by somebody else: not reported
			first: func(ctx context.Context, nft *fakes.NFTables, table host.NFTable, rules []host.NFTRule) error {
				// somebody else (the plugin's own DEL) deletes one rule first
				if err := nft.DeleteRules(ctx, table, rules[:1]); err != nil {
					return fmt.Errorf("concurrent delete: %w", err)
				}
				return nft.DeleteRules(ctx, table, rules)
			},
		},
		{
			name: "the batch was refused",
			first: func(context.Context, *fakes.NFTables, host.NFTable, []host.NFTRule) error {
				return errors.New("Error: Could not process rule: Device or resource busy")
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := singleScenario(t)
			nft := &flakyNFT{NFTables: s.nft, first: tc.first}
			cl := footprint.NewCleaner(context.Background(), s.net, s.seams(nft))
			cl.Prevent([]string{"web-1"})
			items, err := cl.Clean([]string{"web-1"})
			if err != nil {
				t.Fatalf("Clean: %v", err)
			}
			wantDeletes := []string{
				"inet cni_plugins_masquerade 2", // the batch that fails
				"inet cni_plugins_masquerade 1", // then rule by rule
				"inet cni_plugins_masquerade 1",
				"ip cni_hostport 3", // the other tables still in one go
				"ip6 cni_hostport 2",
			}
			if !slices.Equal(nft.deletes, wantDeletes) {
				t.Errorf("DeleteRules calls = %q, want %q", nft.deletes, wantDeletes)
			}
			if got, want := cniRules(s.nft.Rules()), cniRules(loadNFT(t, "single-after-del").Rules()); !slices.EqualFunc(got, want, sameNFTRule) {
				t.Errorf("plugins' tables left:%s\nwant:%s", describeRules(got), describeRules(want))
			}
			if n := countKind(items, footprint.KindNFTRule); n != len(web1Rules)-tc.vanished {
				t.Errorf("reported %d nftables rules removed, want %d", n, len(web1Rules)-tc.vanished)
			}
		})
	}
}

// sameNFTRule compares rules field by field, expressions included.
func sameNFTRule(a, b host.NFTRule) bool { return reflect.DeepEqual(a, b) }
