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
// addresses cleanup judges by (and the ports and verdicts a drift check
// reads) itself; they must be exactly what nft's own JSON listing says,
// rule by rule, for every shape.
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
	want := nftJSONListing(t, tables)
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
				d, err := r.Decode()
				if err != nil {
					t.Fatal(err)
				}
				got = append(got, host.NFTRule{Family: r.Family, Table: r.Table, Chain: r.Chain, Handle: int(r.Handle), Comment: r.Comment,
					Saddr: d.Saddr, Daddr: d.Daddr, DNAT: d.DNAT, DPort: d.DPort, DNATPort: d.DNATPort, Verdict: d.Verdict, Target: d.Target})
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
	t.Run("each rule looked up by its handle, and none where there is no such rule", func(t *testing.T) {
		nft, err := nftables.New()
		if err != nil {
			t.Fatal(err)
		}
		lookup := nft.(host.NFTRuleLookup)
		ctx := context.Background()
		for _, w := range want {
			tb := host.NFTable{Family: w.Family, Name: w.Table}
			r, found, err := lookup.LookupRule(ctx, tb, w.Chain, w.Handle)
			if err != nil || !found || r.Table != tb || r.Chain != w.Chain || r.Handle != w.Handle || r.Comment != w.Comment {
				t.Errorf("LookupRule(%s, %s, %d) = %+v, %v, %v; want the rule nft lists there (comment %q)", tb, w.Chain, w.Handle, r, found, err, w.Comment)
			}
		}
		first := want[0]
		tb := host.NFTable{Family: first.Family, Name: first.Table}
		for _, miss := range []struct {
			name  string
			table host.NFTable
			chain string
		}{
			{"a handle of another chain", tb, map[bool]string{true: "pre", false: "hostports"}[first.Chain != "pre"]},
			{"a chain that does not exist", tb, "nosuch"},
			{"a table that does not exist", host.NFTable{Family: "ip", Name: "cninet_nosuch"}, "pre"},
		} {
			if r, found, err := lookup.LookupRule(ctx, miss.table, miss.chain, first.Handle); err != nil || found {
				t.Errorf("%s: LookupRule(%s, %s, %d) = %+v, %v, %v; want none, no error", miss.name, miss.table, miss.chain, first.Handle, r, found, err)
			}
		}
		if out, err := exec.Command("nft", "delete", "rule", first.Family, first.Table, first.Chain, "handle", fmt.Sprint(first.Handle)).CombinedOutput(); err != nil {
			t.Fatalf("nft delete rule: %v: %s", err, out)
		}
		if r, found, err := lookup.LookupRule(ctx, tb, first.Chain, first.Handle); err != nil || found {
			t.Errorf("a deleted rule: LookupRule = %+v, %v, %v; want none, no error", r, found, err)
		}
	})
}

// nftJSONListing lists tables with `nft -j`, read by ParseListing,
// without the rules' expressions.
func nftJSONListing(t *testing.T, tables []host.NFTable) []host.NFTRule {
	t.Helper()
	var listed []host.NFTRule
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
			listed = append(listed, r)
		}
	}
	return listed
}

// told is everything a listing tells of a rule but its expressions.
func told(r host.NFTRule) string {
	return fmt.Sprintf("%s dport %d dnat port %d verdict %q %q", r, r.DPort, r.DNATPort, r.Verdict, r.Target)
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
		if told(g) != told(w) {
			t.Errorf("rule told differently:\n  got  %s\n  want %s", told(g), told(w))
		}
	}
}

// BenchmarkNFTablesListing lists the plugins' hostport table (16 rules)
// with nft and over netlink, on an empty host and on one holding 30,000
// unrelated nftables rules plus 30,000 iptables-nft rules in kube-proxy's
// shape (10,000 chains of three rules each, in each): nft reads the
// whole ruleset to list one table, netlink reads the table alone.
//
//	go test -run '^$' -bench BenchmarkNFTablesListing -benchtime 50x ./integration/
func BenchmarkNFTablesListing(b *testing.B) {
	netsandbox.Require(b)
	var plugin strings.Builder
	plugin.WriteString("table ip cninet_bench_hostport {\n\tchain hostports {\n")
	for i := range 16 {
		fmt.Fprintf(&plugin, "\t\tip daddr 198.18.78.%d tcp dport %d dnat to 198.18.79.%d:80 comment \"id-%d\"\n", i+1, 8000+i, i+1, i)
	}
	plugin.WriteString("\t}\n}\n")
	nftFile(b, plugin.String())
	b.Cleanup(func() {
		exec.Command("nft", "delete", "table", "ip", "cninet_bench_hostport").Run()
		exec.Command("nft", "delete", "table", "ip", "cninet_bench_other").Run()
		var del strings.Builder
		del.WriteString("*nat\n")
		for i := range 10000 {
			fmt.Fprintf(&del, "-F CNINET-BENCH-%d\n-X CNINET-BENCH-%d\n", i, i)
		}
		cmd := exec.Command("iptables-restore", "-w", "--noflush")
		cmd.Stdin = strings.NewReader(del.String() + "COMMIT\n")
		cmd.Run()
	})
	table := host.NFTable{Family: "ip", Name: "cninet_bench_hostport"}
	listers := []struct {
		name string
		list func() (int, error)
	}{
		{"nft", func() (int, error) {
			out, err := exec.Command("nft", "-j", "list", "table", table.Family, table.Name).Output()
			if err != nil {
				return 0, err
			}
			rules, err := nftables.ParseListing(out)
			return len(rules), err
		}},
		{"netlink", func() (int, error) {
			rules, err := nfnetlink.ListRules(table.Family, table.Name)
			for _, r := range rules {
				if _, err := r.Addrs(); err != nil {
					return 0, err
				}
			}
			return len(rules), err
		}},
	}
	for _, host := range []string{"empty host", "60000 other rules"} {
		if host != "empty host" { // in kube-proxy's shape: a chain per service, a few rules each
			var other, ipt strings.Builder
			other.WriteString("table ip cninet_bench_other {\n")
			ipt.WriteString("*nat\n")
			for i := range 10000 {
				fmt.Fprintf(&other, "\tchain svc%d {\n", i)
				fmt.Fprintf(&ipt, ":CNINET-BENCH-%d - [0:0]\n", i)
				for j := range 3 {
					fmt.Fprintf(&other, "\t\tip daddr 198.19.%d.%d tcp dport %d counter\n", i/256, i%256, 1000+j)
					fmt.Fprintf(&ipt, "-A CNINET-BENCH-%d -d 198.19.%d.%d/32 -p tcp --dport %d -j RETURN\n", i, i/256, i%256, 1000+j)
				}
				other.WriteString("\t}\n")
			}
			other.WriteString("}\n")
			ipt.WriteString("COMMIT\n")
			nftFile(b, other.String())
			cmd := exec.Command("iptables-restore", "-w", "--noflush")
			cmd.Stdin = strings.NewReader(ipt.String())
			if out, err := cmd.CombinedOutput(); err != nil {
				b.Fatalf("iptables-restore: %v: %s", err, out)
			}
		}
		for _, l := range listers {
			b.Run(host+"/"+l.name, func(b *testing.B) {
				for b.Loop() {
					if n, err := l.list(); err != nil || n != 16 {
						b.Fatalf("listed %d rules (%v), want 16", n, err)
					}
				}
			})
		}
	}
}

// nftFile loads rules with nft -f.
func nftFile(b *testing.B, rules string) {
	b.Helper()
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("nft -f: %v: %s", err, out)
	}
}
