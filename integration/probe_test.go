package integration

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/iptables"
	"github.com/seed1280861d/cninet/internal/netsandbox"
	"github.com/seed1280861d/cninet/internal/nftables"
)

const manyRules = 2000

// firstDiff returns the first few entries of a that b lacks, and of b
// that a lacks.
func firstDiff(a, b []string) []string {
	var diff []string
	for _, x := range a {
		if !slices.Contains(b, x) && len(diff) < 5 {
			diff = append(diff, "+"+x)
		}
	}
	for _, x := range b {
		if !slices.Contains(a, x) && len(diff) < 10 {
			diff = append(diff, "-"+x)
		}
	}
	return diff
}

func mustRun(t *testing.T, name string, args ...string) {
	t.Helper()
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v: %s", name, strings.Join(args, " "), err, out)
	}
}

// On the nf_tables backend the host's iptables answers a Teardown's
// questions over netlink; the answers must be what iptables itself says.
func TestIPTablesProbesAgreeWithIPTables(t *testing.T) {
	netsandbox.Require(t)
	for _, fam := range []struct {
		bin            string
		v6             bool
		fw, other, out string // the firewall rules' addresses, and one no rule names
	}{
		{"iptables", false, "198.18.250.5", "198.18.250.6", "198.18.250.7"},
		{"ip6tables", true, "fd00:198:18::5", "fd00:198:18::6", "fd00:198:18::7"},
	} {
		t.Run(fam.bin, func(t *testing.T) {
			version, err := exec.Command(fam.bin, "--version").Output()
			if err != nil {
				t.Fatal(err)
			}
			ipt, err := iptables.New(fam.v6)
			if err != nil {
				t.Fatal(err)
			}
			checker, isChecker := ipt.(host.ChainProber)
			scanner, isScanner := ipt.(host.AddrScanner)
			if nf := strings.Contains(string(version), "(nf_tables)"); nf != isChecker || nf != isScanner {
				t.Fatalf("%s is %q; probes offered: chains %v, rules %v", fam.bin, version, isChecker, isScanner)
			}
			if !isChecker {
				t.Fatalf("%s is on the legacy backend here (%q): nothing to probe over netlink", fam.bin, version)
			}
			// Names of this test's own: other tests' CNI-FORWARD may be there.
			const chain, fw = "CNI-probe0123456789abcdef", "CNINET-PROBE-FORWARD"
			mustRun(t, fam.bin, "-w", "-t", "nat", "-N", chain)
			mustRun(t, fam.bin, "-w", "-N", fw)
			t.Cleanup(func() {
				exec.Command(fam.bin, "-w", "-t", "nat", "-X", chain).Run()
				exec.Command(fam.bin, "-w", "-F", fw).Run()
				exec.Command(fam.bin, "-w", "-X", fw).Run()
			})
			mustRun(t, fam.bin, "-w", "-A", fw, "-s", fam.fw, "-j", "ACCEPT")
			mustRun(t, fam.bin, "-w", "-A", fw, "-d", fam.other, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT")
			for _, c := range []struct {
				table, chain string
				want         bool
			}{{"nat", chain, true}, {"nat", "CNI-DN-probe0123456789abcd", false}, {"filter", fw, true}, {"filter", chain, false}, {"raw", chain, false}} {
				if got, err := checker.ProbeChain(c.table, c.chain); err != nil || got != c.want {
					t.Errorf("ProbeChain(%s, %s) = %v, %v; want %v", c.table, c.chain, got, err, c.want)
				}
			}
			for _, c := range []struct {
				addr string
				want bool
			}{{fam.fw, true}, {fam.other, true}, {fam.out, false}} {
				if got, err := scanner.MayMention("filter", fw, []netip.Addr{netip.MustParseAddr(c.addr)}); err != nil || got != c.want {
					t.Errorf("MayMention(%s) = %v, %v; want %v", c.addr, got, err, c.want)
				}
			}
		})
	}
}

// The host's nftables sees over netlink exactly the rules nft lists, with
// their comments and addresses.
func TestNFTablesMatcherSeesWhatNFTLists(t *testing.T) {
	netsandbox.Require(t)
	// Tables of this test's own, laid out as the plugins' are: other tests'
	// rules may be in the plugins' tables.
	for _, cmd := range []string{
		"add table ip cninet_probe",
		"add chain ip cninet_probe hostports",
		"add chain ip cninet_probe masquerading",
		`add rule ip cninet_probe hostports tcp dport 8080 dnat to 198.18.251.2:80 comment "probe-1"`,
		`add rule ip cninet_probe masquerading ip saddr 127.0.0.1 ip daddr 198.18.251.2 masquerade comment "probe-1"`,
		`add rule ip cninet_probe masquerading ip saddr 198.18.251.3 ip daddr 198.18.251.3 masquerade comment "probe-2"`,
		"add table inet cninet_probe",
		"add chain inet cninet_probe masq_checks",
		`add rule inet cninet_probe masq_checks ip6 saddr fd00:198:18::9 ip6 daddr != fd00:198:18::/64 masquerade comment "0123456789abcdef-fedcba9876543210, net: n, if: eth0, id: probe-1"`,
	} {
		mustRun(t, "nft", cmd)
	}
	// Enough rules that the dump takes many datagrams.
	var many strings.Builder
	for i := range manyRules {
		fmt.Fprintf(&many, "add rule ip cninet_probe hostports tcp dport %d dnat to 198.18.252.%d:80 comment \"many-%d\"\n", 20000+i, 1+i%250, i)
	}
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(many.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft -f: %v: %s", err, out)
	}
	t.Cleanup(func() {
		exec.Command("nft", "delete table ip cninet_probe").Run()
		exec.Command("nft", "delete table inet cninet_probe").Run()
	})
	nft, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	matcher, ok := nft.(host.NFTRuleMatcher)
	if !ok {
		t.Fatal("the host's NFTables offers no NFTRuleMatcher")
	}
	tables := []host.NFTable{{Family: "inet", Name: "cninet_probe"}, {Family: "ip", Name: "cninet_probe"}, {Family: "ip6", Name: "cninet_probe"}}
	listed, err := nft.ListRules(context.Background(), tables)
	if err != nil {
		t.Fatal(err)
	}
	var sketched []host.NFTRuleSketch
	found, err := matcher.AnyRule(context.Background(), tables, func(r host.NFTRuleSketch) bool {
		r.Raw = append([]byte(nil), r.Raw...) // valid only during the call
		sketched = append(sketched, r)
		return false
	})
	if err != nil || found {
		t.Fatalf("AnyRule of a match that never holds = %v, %v", found, err)
	}
	if found, err := matcher.AnyRule(context.Background(), tables, func(r host.NFTRuleSketch) bool { return r.Comment == "probe-2" }); !found || err != nil {
		t.Fatalf("AnyRule(comment probe-2) = %v, %v", found, err)
	}
	last := fmt.Sprintf("many-%d", manyRules-1)
	if found, err := matcher.AnyRule(context.Background(), tables, func(r host.NFTRuleSketch) bool { return r.Comment == last }); !found || err != nil {
		t.Fatalf("AnyRule(comment %s, the last rule of the dump) = %v, %v", last, found, err)
	}
	var want, got []string
	for _, r := range listed {
		want = append(want, r.Family+" "+r.Table+" "+r.Chain+" "+r.Comment)
	}
	for _, r := range sketched {
		got = append(got, r.Table.String()+" "+r.Chain+" "+r.Comment)
	}
	slices.Sort(want)
	slices.Sort(got)
	if len(want) != 4+manyRules || !slices.Equal(got, want) {
		t.Fatalf("%d rules seen over netlink, %d listed by nft (want %d); first differences: %q", len(got), len(want), 4+manyRules, firstDiff(got, want))
	}
	for _, r := range sketched {
		if strings.HasPrefix(r.Comment, "many-") {
			continue
		}
		addr := map[string]string{"probe-1": "198.18.251.2", "probe-2": "198.18.251.3"}[r.Comment]
		if r.Table.Family == "inet" {
			addr = "fd00:198:18::9"
		}
		if !r.Mentions([]netip.Addr{netip.MustParseAddr(addr)}) || r.Mentions([]netip.Addr{netip.MustParseAddr("198.18.251.99")}) {
			t.Errorf("%s %s %q: Mentions(%s) is false, or Mentions(198.18.251.99) true", r.Table, r.Chain, r.Comment, addr)
		}
	}
}
