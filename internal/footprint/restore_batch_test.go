package footprint_test

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// alloc10 is the live attachment alloc-10 of the captures.
func alloc10(t *testing.T, dir string) *footprint.Live {
	t.Helper()
	l := alloc1(t, dir)
	l.ID = "alloc-10"
	l.Result.IPs = []footprint.ResultIP{{Addr: netip.MustParsePrefix("198.18.0.3/24"), Interface: 2},
		{Addr: netip.MustParsePrefix("fd00:198:18::3/64"), Interface: 2}}
	l.Mappings = []footprint.PortMapping{{HostPort: 8081, ContainerPort: 80, Protocol: "tcp"},
		{HostPort: 8081, ContainerPort: 80, Protocol: "udp"}, {HostPort: 9091, ContainerPort: 9090, Protocol: "tcp"}}
	return l
}

// A batched repair writes what the plugins wrote: after each drift of the
// captures (two attachments written by the real plugins), the tables the
// batch leaves equal the captures — in each chain's order where the
// drift took whole chains, as a multiset where a rule comes back at the
// end of a shared chain (where the plugins' own ADD appends it too) — and
// a drift it cannot restore in the plugins' order is left to them.
func TestABatchedRepairWritesWhatThePluginsWrote(t *testing.T) {
	reload := func(_ string, _ bool, listing string) string { // iptables -F; iptables -X
		var kept []string
		for _, line := range strings.Split(listing, "\n") {
			if strings.HasPrefix(line, "-P ") {
				kept = append(kept, line)
			}
		}
		return strings.Join(kept, "\n")
	}
	without := func(sub string) func(string, bool, string) string {
		return func(_ string, _ bool, listing string) string {
			return strings.Join(slices.DeleteFunc(strings.Split(listing, "\n"), func(l string) bool { return strings.Contains(l, sub) }), "\n")
		}
	}
	cases := []struct {
		name        string
		drift       func(table string, v6 bool, listing string) string
		wantMembers []int
		inOrder     bool // each chain's rules in the captures' order, not only as a multiset
	}{
		{name: "a firewall reload: every table flushed and its chains deleted, in both families",
			drift: reload, wantMembers: []int{0, 1}, inOrder: true},
		{name: "the nat table flushed",
			drift: func(table string, v6 bool, l string) string {
				if table == "nat" {
					return reload(table, v6, l)
				}
				return l
			}, wantMembers: []int{0, 1}, inOrder: true},
		{name: "one attachment's DNAT jumps deleted: appended again, as portmap appends them",
			drift: without(`-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \"nomad\" id: \"alloc-1\""`), wantMembers: []int{0}},
		{name: "the shared mark rule and the firewall's admin jump deleted: written once for both",
			drift: func(table string, v6 bool, l string) string {
				return without("CNI firewall plugin admin overrides")(table, v6, without("-A CNI-HOSTPORT-SETMARK")(table, v6, l))
			}, wantMembers: []int{0, 1}, inOrder: true},
		{name: "one attachment's masquerade chain and jump deleted: the chain and its rules in order",
			drift: without("CNI-9142979c1d97ca631090d042"), wantMembers: []int{0}},
		{name: "a rule of an attachment's own chain deleted is left to its plugin's ADD (its place in the chain)",
			drift: without("-A CNI-DN-9142979c1d97ca631090d -s 127.0.0.1/32 -p udp")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			lives := []*footprint.Live{alloc1(t, filepath.Join(dir, "1")), alloc10(t, filepath.Join(dir, "10"))}
			want := map[bool]map[string]string{}
			fams := map[bool]*fakes.IPTables{}
			for _, v6 := range []bool{false, true} {
				fams[v6], want[v6] = fakes.NewIPTables(), map[string]string{}
				suffix := map[bool]string{false: "ipv4", true: "ipv6"}[v6]
				for _, table := range []string{"nat", "filter"} {
					b, err := os.ReadFile(filepath.Join(iptCaptures, "dual-"+table+"-"+suffix+".txt"))
					if err != nil {
						t.Fatal(err)
					}
					want[v6][table] = fakes.NewIPTables().Load(table, string(b)).Save(table)
					fams[v6].Load(table, tc.drift(table, v6, string(b)))
				}
			}
			seams := footprint.Seams{
				IPTables: func(v6 bool) (host.IPTables, error) {
					return fakes.Saving{Batching: &fakes.Batching{IPTables: fams[v6]}}, nil
				},
				NFTables: func() (host.NFTables, error) { return &fakes.NFTables{}, nil },
			}
			c := footprint.NewChecker(context.Background(), seams)
			drifted := map[bool]map[string]string{false: {}, true: {}}
			for v6, ipt := range fams {
				for _, table := range []string{"nat", "filter"} {
					drifted[v6][table] = ipt.Save(table)
				}
			}
			hs := c.Check(lives)
			t.Logf("plan:\n%s", footprint.PlanRules(hs))
			members, err := c.RestoreRules(hs)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(members, tc.wantMembers) {
				t.Fatalf("the batch wrote for %v, want %v", members, tc.wantMembers)
			}
			if tc.wantMembers == nil {
				for v6, ipt := range fams {
					for _, table := range []string{"nat", "filter"} {
						if got := ipt.Save(table); got != drifted[v6][table] {
							t.Fatalf("a batch of no member changed %s:\n%s\nwas:\n%s", table, got, drifted[v6][table])
						}
					}
				}
				if h := c.Check(lives)[0]; h.FirewallWhole() {
					t.Fatal("alloc-1 is whole after a batch that wrote nothing")
				}
				return
			}
			for i, h := range footprint.NewChecker(context.Background(), seams).Check(lives) {
				if !h.FirewallWhole() {
					t.Errorf("%s lacks after the batch: %v", lives[i].ID, missing(h))
				}
			}
			for v6, tables := range want {
				for table, w := range tables {
					got := fams[v6].Save(table)
					if !tc.inOrder {
						got, w = sortedLines(got), sortedLines(w)
					}
					if got != w {
						t.Errorf("%s %s after the batch:\n%s\nwant (the plugins'):\n%s", map[bool]string{false: "iptables", true: "ip6tables"}[v6], table, got, w)
					}
				}
			}
		})
	}
}

func sortedLines(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}
