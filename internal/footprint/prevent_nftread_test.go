package footprint_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"slices"
	"testing"

	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// cachedV4 is libcni's cached result of an attachment with an IPv4
// address alone.
func cachedV4(network, ifName, id, v4 string) hostFile {
	raw, err := json.Marshal(map[string]any{"kind": "cniCacheV1", "containerId": id, "ifName": ifName, "networkName": network,
		"result": map[string]any{"cniVersion": "1.0.0", "ips": []map[string]string{{"address": v4 + "/24"}}}})
	if err != nil {
		panic(err)
	}
	return hostFile{"cache/results/" + network + "-" + id + "-" + ifName, string(raw)}
}

// Before portmap's DEL, the prevention reads only the rules that can
// matter: those carrying the attachment's id (and its own masquerade
// comments) in the chains portmap's DEL reads. Whatever reads it (a
// search by comment, chain by chain; a scan of whole tables; a listing),
// a rule of the id that is not the attachment's is found wherever that
// DEL would delete it, so portmap is left out and the rule survives; a
// rule of the id where that DEL never looks keeps nothing out.
func TestPreventionFindsEveryForeignRuleOfTheIDWherePortmapsDELWouldDeleteIt(t *testing.T) {
	// same-1 on nftnet1 holds 198.18.1.2 alone; on nftnet2, same-1's
	// hostport rules are those of keep, and add.
	ownV6 := []string{"inet masq_checks 7", "ip6 hostports 11", "ip6 masquerading 12"}
	foreign := func(family, chain string, dnat, daddr string) host.NFTRule {
		r := host.NFTRule{Family: family, Table: "cni_hostport", Chain: chain, Comment: "same-1"}
		if dnat != "" {
			r.DNAT = netip.MustParseAddr(dnat)
		}
		if daddr != "" {
			r.Daddr = netip.MustParseAddr(daddr)
		}
		return r
	}
	cases := []struct {
		name    string
		keep    []string // of network 2's hostport rules in the capture
		add     []host.NFTRule
		omitted bool // portmap is left out of the DEL
	}{
		{name: "a DNAT of the id in the family the attachment has no address of", keep: []string{"ip6 hostports 17"}, omitted: true},
		{name: "a hairpin masquerade of the id alone, in the other family", keep: []string{"ip6 masquerading 18"}, omitted: true},
		{name: "a masquerade of the id alone, in the attachment's family", keep: []string{"ip masquerading 19"}, omitted: true},
		{name: "a DNAT of the id for a host IP, in hostip_hostports", add: []host.NFTRule{
			foreign("ip", "hostip_hostports", "198.18.2.2", "198.18.9.1")}, omitted: true},
		{name: "a DNAT of the id in the other family's hostip_hostports", add: []host.NFTRule{
			foreign("ip6", "hostip_hostports", "fd00:198:18:0:2::2", "fd00:198:18:9::1")}, omitted: true},
		{name: "rules of the id in chains portmap's DEL never reads keep nothing out", add: []host.NFTRule{
			foreign("ip", "prerouting", "198.18.2.2", ""), foreign("ip6", "output", "fd00:198:18:0:2::2", "")}},
		{name: "no rule of the id but the attachment's own: portmap's DEL runs"},
	}
	matching := func(f *fakes.NFTables) host.NFTables { return fakes.Matching{NFTables: f} }
	readers := []struct {
		name    string
		nft     func(*fakes.NFTables) host.NFTables
		recheck bool   // Cleaner.RecheckByHandle: the read keeps what it saw of the set's own
		calls   string // the read that must have answered
	}{
		{"searched by comment in portmap's six chains", matching, false,
			"FindRules ip cni_hostport hostip_hostports, ip cni_hostport hostports, ip cni_hostport masquerading, " +
				"ip6 cni_hostport hostip_hostports, ip6 cni_hostport hostports, ip6 cni_hostport masquerading"},
		{"searched by comment, the masquerade chain too, for the recheck by handle", matching, true,
			"FindRules inet cni_plugins_masquerade masq_checks, ip cni_hostport hostip_hostports, ip cni_hostport hostports, ip cni_hostport masquerading, " +
				"ip6 cni_hostport hostip_hostports, ip6 cni_hostport hostports, ip6 cni_hostport masquerading"},
		{"a failed search: the tables scanned", func(f *fakes.NFTables) host.NFTables {
			return fakes.Matching{NFTables: f, FailFind: errors.New("netlink: dump failed")}
		}, true, "AnyRule"},
		{"listed, where nothing reads in-process", func(f *fakes.NFTables) host.NFTables { return f }, false, "ListRules"},
	}
	for _, r := range readers {
		for _, tc := range cases {
			t.Run(r.name+"/"+tc.name, func(t *testing.T) {
				drop := append(slices.Clone(ownV6), slices.DeleteFunc(slices.Clone(secondHostport), func(k string) bool { return slices.Contains(tc.keep, k) })...)
				files := []hostFile{reserved(nftnet1, "eth0", "same-1", "198.18.1.2"), cachedV4(nftnet1, "eth0", "same-1", "198.18.1.2")}
				s := newScenario(t, "two-networks-same-id", nftnet1, "eth0", files, drop...)
				s.net.HostportNFT = true
				if err := s.nft.AddRules(context.Background(), tc.add); err != nil {
					t.Fatal(err)
				}
				others := func() []string { // every rule of the id but network 1's
					var out []string
					for _, rule := range s.nft.Rules() {
						if rule.Comment == "same-1" && !slices.Contains([]netip.Addr{rule.DNAT, rule.Daddr}, netip.MustParseAddr("198.18.1.2")) {
							out = append(out, rule.String())
						}
					}
					return out
				}
				before := others()
				if len(before) != len(tc.keep)+len(tc.add) {
					t.Fatalf("the host holds %d rules of the id besides network 1's, want %d: %q", len(before), len(tc.keep)+len(tc.add), before)
				}
				cl := footprint.NewCleaner(context.Background(), s.net, s.seams(r.nft(s.nft)))
				cl.RecheckByHandle = r.recheck
				p, err := cl.Prevent([]string{"same-1"})
				if err != nil {
					t.Fatal(err)
				}
				if !slices.Contains(s.nft.Calls(), r.calls) {
					t.Errorf("nftables calls %q: the prevention did not read with %s", s.nft.Calls(), r.calls)
				}
				if omitted := slices.Contains(p.Omit, "portmap"); omitted != tc.omitted {
					t.Fatalf("Omit = %q, want portmap left out: %v", p.Omit, tc.omitted)
				}
				if !slices.Contains(p.Omit, "portmap") {
					delByID(t, s.nft, "same-1")
				}
				if _, err := cl.Clean([]string{"same-1"}); err != nil {
					t.Fatal(err)
				}
				if after := others(); !slices.Equal(after, before) {
					t.Errorf("the id's other rules after network 1's DEL and cleanup: %q, want all of %q", after, before)
				}
				for _, rule := range s.nft.Rules() {
					if rule.Comment == "same-1" && (rule.DNAT == netip.MustParseAddr("198.18.1.2") || rule.Daddr == netip.MustParseAddr("198.18.1.2")) {
						t.Errorf("network 1's own rule is left: %s", rule)
					}
				}
			})
		}
	}
}
