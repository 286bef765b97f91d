package fakes_test

import (
	"context"
	"errors"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/knftables"

	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
)

// hostportScript is the transaction portmap's nftables backend runs for
// one container with a port mapping, as knftables renders it.
func hostportScript() string {
	tx := knftables.NewFake(knftables.IPv4Family, "cni_hostport").NewTransaction()
	tx.Add(&knftables.Table{Comment: knftables.PtrTo("CNI portmap plugin")})
	tx.Add(&knftables.Chain{Name: "hostports"})
	tx.Add(&knftables.Chain{Name: "hostip_hostports"})
	tx.Add(&knftables.Chain{Name: "hostports_all"})
	tx.Flush(&knftables.Chain{Name: "hostports_all"})
	tx.Add(&knftables.Rule{Chain: "hostports_all", Rule: knftables.Concat("jump", "hostip_hostports")})
	tx.Add(&knftables.Rule{Chain: "hostports_all", Rule: knftables.Concat("jump", "hostports")})
	tx.Add(&knftables.Chain{Name: "prerouting", Type: knftables.PtrTo(knftables.NATType),
		Hook: knftables.PtrTo(knftables.PreroutingHook), Priority: knftables.PtrTo(knftables.DNATPriority)})
	tx.Flush(&knftables.Chain{Name: "prerouting"})
	tx.Add(&knftables.Rule{Chain: "prerouting", Rule: knftables.Concat("fib daddr type local", "jump", "hostports_all")})
	tx.Add(&knftables.Chain{Name: "masquerading", Type: knftables.PtrTo(knftables.NATType),
		Hook: knftables.PtrTo(knftables.PostroutingHook), Priority: knftables.PtrTo(knftables.SNATPriority)})
	tx.Add(&knftables.Rule{Chain: "hostports", Rule: knftables.Concat("tcp", "dport", 28084, "dnat to", "198.18.1.2:80"),
		Comment: knftables.PtrTo("web-1")})
	tx.Add(&knftables.Rule{Chain: "hostports", Rule: knftables.Concat("ip", "daddr", "198.18.0.1", "udp", "dport", 5353, "dnat to", "198.18.1.2:53"),
		Comment: knftables.PtrTo("web-1")})
	tx.Add(&knftables.Rule{Chain: "masquerading", Rule: knftables.Concat("ip", "saddr", "198.18.1.2", "ip", "daddr", "198.18.1.2", "masquerade"),
		Comment: knftables.PtrTo("web-1")})
	return tx.String()
}

// masqScript is the transaction the bridge plugin's nftables masquerade
// runs for one address, as knftables renders it.
func masqScript() string {
	tx := knftables.NewFake(knftables.InetFamily, "cni_plugins_masquerade").NewTransaction()
	tx.Add(&knftables.Table{})
	tx.Add(&knftables.Chain{Name: "masq_checks", Comment: knftables.PtrTo("Masquerade traffic from certain IPs to any (non-multicast) IP outside their subnet")})
	tx.Add(&knftables.Chain{Name: "postrouting", Type: knftables.PtrTo(knftables.NATType),
		Hook: knftables.PtrTo(knftables.PostroutingHook), Priority: knftables.PtrTo(knftables.SNATPriority)})
	tx.Flush(&knftables.Chain{Name: "postrouting"})
	tx.Add(&knftables.Rule{Chain: "postrouting", Rule: "ip daddr == 224.0.0.0/4  return"})
	tx.Add(&knftables.Rule{Chain: "postrouting", Rule: "ip6 daddr == ff00::/8  return"})
	tx.Add(&knftables.Rule{Chain: "postrouting", Rule: knftables.Concat("goto", "masq_checks")})
	tx.Add(&knftables.Rule{Chain: "masq_checks", Rule: knftables.Concat("ip", "saddr", "==", "198.18.1.2", "ip", "daddr", "!=", "198.18.1.0/24", "masquerade"),
		Comment: knftables.PtrTo("0123456789abcdef-fedcba9876543210, net: net, if: eth0, id: web-1")})
	// Negations name nothing, as in nft's listing.
	tx.Add(&knftables.Rule{Chain: "masq_checks", Rule: "tcp dport != 80 ip saddr != 198.18.1.5 ip daddr != 198.18.1.6 accept"})
	return tx.String()
}

// brief is what a rule says, without where it is.
type brief struct {
	Chain              string
	Comment            string
	Saddr, Daddr, DNAT string
	DPort, DNATPort    uint16
	Verdict, Target    string
}

func briefs(rules []host.NFTRule) []brief {
	var out []brief
	addr := func(a netip.Addr) string {
		if !a.IsValid() {
			return ""
		}
		return a.String()
	}
	for _, r := range rules {
		out = append(out, brief{r.Chain, r.Comment, addr(r.Saddr), addr(r.Daddr), addr(r.DNAT), r.DPort, r.DNATPort, r.Verdict, r.Target})
	}
	return out
}

func TestRunScriptReadsWhatKnftablesRendersForThePlugins(t *testing.T) {
	for _, tc := range []struct {
		name   string
		script string
		table  host.NFTable
		want   []brief
	}{
		{"portmap's hostport chains and one container's mappings", hostportScript(), host.NFTable{Family: "ip", Name: "cni_hostport"}, []brief{
			{Chain: "hostports_all", Verdict: "jump", Target: "hostip_hostports"},
			{Chain: "hostports_all", Verdict: "jump", Target: "hostports"},
			{Chain: "prerouting", Verdict: "jump", Target: "hostports_all"},
			{Chain: "hostports", Comment: "web-1", DPort: 28084, DNAT: "198.18.1.2", DNATPort: 80},
			{Chain: "hostports", Comment: "web-1", Daddr: "198.18.0.1", DPort: 5353, DNAT: "198.18.1.2", DNATPort: 53},
			{Chain: "masquerading", Comment: "web-1", Saddr: "198.18.1.2", Daddr: "198.18.1.2"},
		}},
		{"the bridge's masquerade", masqScript(), host.NFTable{Family: "inet", Name: "cni_plugins_masquerade"}, []brief{
			{Chain: "postrouting", Verdict: "return"},
			{Chain: "postrouting", Verdict: "return"},
			{Chain: "postrouting", Verdict: "goto", Target: "masq_checks"},
			{Chain: "masq_checks", Comment: "0123456789abcdef-fedcba9876543210, net: net, if: eth0, id: web-1", Saddr: "198.18.1.2"},
			{Chain: "masq_checks", Verdict: "accept"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nft := &fakes.NFTables{}
			if err := nft.RunScript(context.Background(), tc.script); err != nil {
				t.Fatalf("RunScript(%s) = %v", tc.script, err)
			}
			rules, err := nft.ListRules(context.Background(), []host.NFTable{tc.table})
			if err != nil {
				t.Fatal(err)
			}
			if got := briefs(rules); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("rules:\n  %+v\nwant\n  %+v", got, tc.want)
			}
			for i, r := range rules {
				if i > 0 && r.Handle <= rules[i-1].Handle {
					t.Errorf("handles %d then %d: want each new rule a handle of its own, increasing", rules[i-1].Handle, r.Handle)
				}
			}
			// Run again, as the plugin's ADD does: the flushed chains are
			// rewritten, the rest added again.
			if err := nft.RunScript(context.Background(), tc.script); err != nil {
				t.Fatalf("RunScript again = %v", err)
			}
			again, _ := nft.ListRules(context.Background(), []host.NFTable{tc.table})
			if len(again) <= len(rules) {
				t.Errorf("%d rules after a second run, want more than %d: an add adds", len(again), len(rules))
			}
		})
	}
}

func TestRunScriptAppliesAllOrNothing(t *testing.T) {
	for _, tc := range []struct {
		name    string
		script  string
		says    string // the error names the line
		wantNot bool   // the script is refused
	}{
		{"a rule in a chain that is not there", "add rule ip cni_hostport nosuch tcp dport 1 dnat to 198.18.1.9:1", "nosuch", true},
		{"a table that is not there", "add chain ip nosuch c", "ip nosuch", true},
		{"a rule handle that is not there", "delete rule ip cni_hostport hostports handle 999", "handle 999", true},
		{"a set is not read", "add rule ip cni_hostport hostports tcp dport { 80, 443 } accept", "{ 80, 443 }", true},
		{"an unknown statement", "add rule ip cni_hostport hostports ct state established accept", "ct state", true},
		{"a verb not in the subset", "insert rule ip cni_hostport hostports accept", "insert rule", true},
		{"a verb not in the subset, of a table that is not there", "delete table ip nosuch", "delete table", true},
		{"a deletion by handle, and a flush", "delete rule ip cni_hostport hostports handle 1\nflush chain ip cni_hostport masquerading", "", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			nft := &fakes.NFTables{}
			nft.Add(host.NFTRule{Family: "ip", Table: "cni_hostport", Chain: "hostports", Handle: 1, Comment: "a"},
				host.NFTRule{Family: "ip", Table: "cni_hostport", Chain: "masquerading", Handle: 2, Comment: "a"})
			changes, err := nft.WatchChanges(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			before := nft.Rules()
			// Good lines first: refused with the rest, or applied.
			err = nft.RunScript(context.Background(), "add table ip cninet_other\nadd chain ip cninet_other c\n"+
				"add rule ip cni_hostport hostports tcp dport 2 dnat to 198.18.1.9:2\n"+tc.script+"\n")
			other := nft.RunScript(context.Background(), "add rule ip cninet_other c accept")
			if tc.wantNot {
				if err == nil || !strings.Contains(err.Error(), tc.says) || !strings.Contains(err.Error(), "line 4") {
					t.Fatalf("RunScript = %v, want an error naming line 4 and %q", err, tc.says)
				}
				if after := nft.Rules(); !reflect.DeepEqual(after, before) {
					t.Errorf("rules after a refused script: %+v, want them as before: %+v", after, before)
				}
				if other == nil {
					t.Error("the table and chain of a refused script are there")
				}
				if len(changes) != 0 {
					t.Error("a refused script signalled a change")
				}
				return
			}
			if other != nil {
				t.Errorf("a rule in the chain the script added: %v", other)
			}
			if err != nil {
				t.Fatal(err)
			}
			want := []brief{{Chain: "hostports", DPort: 2, DNAT: "198.18.1.9", DNATPort: 2}, {Chain: "c", Verdict: "accept"}}
			if got := briefs(nft.Rules()); !reflect.DeepEqual(got, want) {
				t.Errorf("rules: %+v; want only those added: %+v", got, want)
			}
			if r := nft.Rules()[0]; r.Handle != 3 {
				t.Errorf("the new rule's handle is %d, want 3: after the table's last", r.Handle)
			}
			if len(changes) != 1 {
				t.Error("an applied script signalled no change")
			}
		})
	}
}

func TestFakeNFTablesSignalsEveryChangeAndClosesWithItsContext(t *testing.T) {
	rule := host.NFTRule{Family: "ip", Table: "cni_hostport", Chain: "hostports", Handle: 1, Comment: "a"}
	table := host.NFTable{Family: "ip", Name: "cni_hostport"}
	for _, tc := range []struct {
		name   string
		setup  bool // the rule is there before the watching starts
		change func(f *fakes.NFTables) error
		signal bool
	}{
		{"Add", false, func(f *fakes.NFTables) error { f.Add(rule); return nil }, true},
		{"Load", false, func(f *fakes.NFTables) error {
			return f.Load([]byte(`{"nftables": [{"rule": {"family": "ip", "table": "t", "chain": "c", "handle": 9, "expr": []}}]}`))
		}, true},
		{"AddRules", false, func(f *fakes.NFTables) error { return f.AddRules(context.Background(), []host.NFTRule{rule}) }, true},
		{"DeleteRules", true, func(f *fakes.NFTables) error {
			return f.DeleteRules(context.Background(), table, []host.NFTRule{rule})
		}, true},
		{"RunScript", false, func(f *fakes.NFTables) error { return f.RunScript(context.Background(), "add table ip x") }, true},
		{"FlushTable", true, func(f *fakes.NFTables) error { f.FlushTable(table); return nil }, true},
		{"FlushRuleset", true, func(f *fakes.NFTables) error { f.FlushRuleset(); return nil }, true},
		{"an empty script is none", true, func(f *fakes.NFTables) error { return f.RunScript(context.Background(), "\n") }, false},
		{"a listing is no change", true, func(f *fakes.NFTables) error {
			_, err := f.ListRules(context.Background(), []host.NFTable{table})
			return err
		}, false},
		{"a failed deletion is none", false, func(f *fakes.NFTables) error {
			if f.DeleteRules(context.Background(), table, []host.NFTRule{rule}) == nil {
				return errors.New("deleting a rule that is not there succeeded")
			}
			return nil
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakes.NFTables{}
			if tc.setup {
				f.Add(rule)
			}
			ctx, cancel := context.WithCancel(context.Background())
			changes, err := f.WatchChanges(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.change(f); err != nil {
				t.Fatal(err)
			}
			if got := len(changes) == 1; got != tc.signal {
				t.Errorf("signalled: %v, want %v", got, tc.signal)
			}
			for range 3 { // nobody reads: the fake never waits
				f.Add(rule)
			}
			cancel()
			for range changes { // drains, then ends: the channel is closed
			}
			if n := f.Watchers(); n != 0 {
				t.Errorf("%d watchers after their context ended, want 0", n)
			}
			f.Add(rule) // no send on a closed channel
		})
	}
}
