package integration

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/netsandbox"
	"github.com/seed1280861d/cninet/internal/nfnetlink"
	"github.com/seed1280861d/cninet/internal/nftables"
)

// nftListingRules are rules of every shape the plugins' nftables backends
// write (portmap's DNATs and hairpin masquerades, bridge's masquerade)
// and of the shapes that name no single address (a negation, a prefix, a
// set, a range, a map), in ip, ip6 and inet tables of the test's own.
const nftListingRules = `
table ip cninet_listing {
	chain hostports {
		ip daddr 198.18.77.30 udp dport 53 dnat to 198.18.77.31:53 comment "id-c"
		meta l4proto tcp ip daddr 198.18.77.32 counter
	}
	chain pre {
		type nat hook prerouting priority -100;
		ip daddr 198.18.77.1 tcp dport 8080 dnat to 198.18.77.10:80 comment "id-a"
		tcp dport 8081 dnat to 198.18.77.11:80 comment "id-b"
		ip daddr 198.18.77.0/24 tcp dport 9 dnat to 198.18.77.12
		ip daddr != 198.18.77.2 dnat to 198.18.77.13
		ip daddr { 198.18.77.3, 198.18.77.4 } dnat to 198.18.77.14
		tcp dport 10 dnat to 198.18.77.15-198.18.77.16
		dnat to ip daddr map { 198.18.77.5 : 198.18.77.17 }
		ip saddr 198.18.77.6 ip daddr 198.18.77.7 counter dnat to 198.18.77.18 comment "both"
		ip saddr 198.18.77.0/31 dnat to 198.18.77.19
		ip daddr 198.18.77.8 jump hostports
	}
	chain post {
		type nat hook postrouting priority 100;
		ip saddr 198.18.77.20 ip daddr != 224.0.0.0/4 masquerade comment "name: x id: y"
		ip saddr 127.0.0.1 ip daddr 198.18.77.21 masquerade comment "id-a"
		ip saddr 198.18.77.22 ip daddr 198.18.77.22 masquerade
	}
}
table ip6 cninet_listing {
	chain pre {
		type nat hook prerouting priority -100;
		ip6 daddr fd00:198:18::1 tcp dport 8080 dnat to [fd00:198:18::10]:80 comment "id-6"
		ip6 daddr fd00:198:18::/64 dnat to fd00:198:18::11
		ip6 saddr ::ffff:198.18.77.40 dnat to fd00:198:18::12
	}
	chain post {
		type nat hook postrouting priority 100;
		ip6 saddr fd00:198:18::2 ip6 daddr fd00:198:18::2 masquerade comment "id-6"
	}
}
table inet cninet_listing {
	chain pre {
		type nat hook prerouting priority -100;
		ip daddr 198.18.77.51 dnat ip to 198.18.77.52
		ip6 daddr fd00:198:18::51 dnat ip6 to fd00:198:18::52
		meta nfproto ipv4 ip daddr 198.18.77.53 counter
		tcp dport 22 counter
	}
	chain post {
		type nat hook postrouting priority 100;
		ip saddr 198.18.77.50 ip daddr != 224.0.0.0/4 masquerade comment "m4"
		ip6 saddr fd00:198:18::50 ip6 daddr != ff00::/8 masquerade comment "m6"
	}
}
`

// cninet lists the plugins' nftables tables over netlink and decodes the
// addresses cleanup judges by itself; they must be exactly what nft's own
// JSON listing says, rule by rule, for every shape.
func TestNFTablesListingOverNetlinkAgreesWithNft(t *testing.T) {
	netsandbox.Require(t)
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(nftListingRules)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft -f: %v: %s", err, out)
	}
	tables := []host.NFTable{{Family: "ip", Name: "cninet_listing"}, {Family: "ip6", Name: "cninet_listing"}, {Family: "inet", Name: "cninet_listing"}}
	t.Cleanup(func() {
		for _, tb := range tables {
			exec.Command("nft", "delete", "table", tb.Family, tb.Name).Run()
		}
	})
	var want []host.NFTRule
	for _, tb := range tables {
		out, err := exec.Command("nft", "-j", "list", "table", tb.Family, tb.Name).Output()
		if err != nil {
			t.Fatal(err)
		}
		rules, err := nftables.ParseListing(out)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rules {
			r.Expr = nil
			want = append(want, r)
		}
	}
	var addressed int
	for _, r := range want {
		if r.Saddr.IsValid() || r.Daddr.IsValid() || r.DNAT.IsValid() {
			addressed++
		}
	}
	if len(want) != 25 || addressed < 15 {
		t.Fatalf("nft lists %d rules, %d with an address; want the 25 written, most with one", len(want), addressed)
	}

	t.Run("rule by rule, as nfnetlink decodes them", func(t *testing.T) {
		var got []host.NFTRule
		for _, tb := range tables {
			rules, err := nfnetlink.ListRules(tb.Family, tb.Name)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range rules {
				a, err := r.Addrs()
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, host.NFTRule{Family: r.Family, Table: r.Table, Chain: r.Chain, Handle: int(r.Handle), Comment: r.Comment,
					Saddr: a.Saddr, Daddr: a.Daddr, DNAT: a.DNAT})
			}
		}
		compareListings(t, got, want)
	})
	t.Run("through the default NFTables", func(t *testing.T) {
		nft, err := nftables.New()
		if err != nil {
			t.Fatal(err)
		}
		got, err := nft.ListRules(context.Background(), tables)
		if err != nil {
			t.Fatal(err)
		}
		compareListings(t, got, want)
	})
}

// compareListings fails t for each rule (by table and handle) that got
// and want tell differently.
func compareListings(t *testing.T, got, want []host.NFTRule) {
	t.Helper()
	key := func(r host.NFTRule) string { return fmt.Sprintf("%s %s %d", r.Family, r.Table, r.Handle) }
	byKey := map[string]host.NFTRule{}
	for _, r := range got {
		byKey[key(r)] = r
	}
	if len(got) != len(want) {
		t.Errorf("%d rules, want %d", len(got), len(want))
	}
	for _, w := range want {
		g, ok := byKey[key(w)]
		if !ok {
			t.Errorf("missing: %s", w)
			continue
		}
		if g.String() != w.String() {
			t.Errorf("rule told differently:\n  got  %s\n  want %s", g, w)
		}
	}
}
