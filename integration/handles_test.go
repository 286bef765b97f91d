package integration

import (
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/iptables"
	"github.com/seed1280861d/cninet/internal/netsandbox"
	"github.com/seed1280861d/cninet/internal/nftables"
)

const plantedRules = 600

func restore(t *testing.T, bin string, input string) {
	t.Helper()
	cmd := exec.Command(bin, "-w", "--noflush")
	cmd.Stdin = strings.NewReader(input)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v: %s", bin, err, out)
	}
}

func listNat(t *testing.T, bin string) []string {
	t.Helper()
	out, err := exec.Command(bin, "-w", "-t", "nat", "-S").Output()
	if err != nil {
		t.Fatal(err)
	}
	var mine []string
	for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.Contains(l, "CNINET-HD") {
			mine = append(mine, l)
		}
	}
	return mine
}

// On the nf_tables backend, iptables' rules planned for deletion go by
// nf_tables handle: exactly the chosen rules and chains, nothing else,
// and a rule that is no longer where the listing had it is left alone.
func TestIPTablesDeletesByHandleExactlyTheChosenRules(t *testing.T) {
	netsandbox.Require(t)
	for _, fam := range []struct {
		bin, restore, addr string
		v6                 bool
	}{
		{"iptables", "iptables-restore", "198.18.%d.%d/32", false},
		{"ip6tables", "ip6tables-restore", "fd00:198:18::%x:%x/128", true},
	} {
		t.Run(fam.bin, func(t *testing.T) {
			ipt, err := iptables.New(fam.v6)
			if err != nil {
				t.Fatal(err)
			}
			hd, ok := ipt.(host.HandleDeleter)
			if !ok {
				t.Fatalf("%s offers no deletion by handle: not on the nf_tables backend here", fam.bin)
			}
			// One jump per id in a shared chain, and a chain of its own per id,
			// as the bridge plugin lays them out.
			var in strings.Builder
			in.WriteString("*nat\n:CNINET-HD-POST - [0:0]\n")
			for i := range plantedRules {
				fmt.Fprintf(&in, ":CNINET-HD-%d - [0:0]\n", i)
			}
			for i := range plantedRules {
				addr := fmt.Sprintf(fam.addr, 200+i/250, 1+i%250)
				fmt.Fprintf(&in, "-A CNINET-HD-POST -s %s -m comment --comment \"name: \\\"hd\\\" id: \\\"id-%d\\\"\" -j CNINET-HD-%d\n", addr, i, i)
				fmt.Fprintf(&in, "-A CNINET-HD-%d -d %s -m comment --comment \"name: \\\"hd\\\" id: \\\"id-%d\\\"\" -j ACCEPT\n", i, addr, i)
				fmt.Fprintf(&in, "-A CNINET-HD-%d -m comment --comment \"name: \\\"hd\\\" id: \\\"id-%d\\\"\" -j MASQUERADE\n", i, i)
			}
			in.WriteString("COMMIT\n")
			restore(t, fam.restore, in.String())
			t.Cleanup(func() {
				var out strings.Builder
				out.WriteString("*nat\n-F CNINET-HD-POST\n")
				for _, l := range listNat(t, fam.bin) {
					if strings.HasPrefix(l, "-N ") {
						fmt.Fprintf(&out, "-F %s\n", strings.TrimPrefix(l, "-N "))
					}
				}
				for _, l := range listNat(t, fam.bin) {
					if strings.HasPrefix(l, "-N ") {
						fmt.Fprintf(&out, "-X %s\n", strings.TrimPrefix(l, "-N "))
					}
				}
				out.WriteString("COMMIT\n")
				restore(t, fam.restore, out.String())
			})
			before := listNat(t, fam.bin)
			var post []string
			for _, l := range before {
				if strings.HasPrefix(l, "-A CNINET-HD-POST ") {
					post = append(post, l)
				}
			}
			// Every third id is chosen; id 300's jump is taken away after the
			// listing, so it and every jump after it are no longer where the
			// listing had them.
			var rules []host.ListedRule
			var chains, gone []string
			for i := 0; i < plantedRules; i += 3 {
				rules = append(rules, host.ListedRule{Line: post[i], Position: i})
				chains = append(chains, fmt.Sprintf("CNINET-HD-%d", i))
				gone = append(gone, post[i], fmt.Sprintf("-N CNINET-HD-%d", i))
				for _, l := range before {
					if strings.HasPrefix(l, fmt.Sprintf("-A CNINET-HD-%d ", i)) {
						gone = append(gone, l)
					}
				}
			}
			const moved = 300
			restore(t, fam.restore, "*nat\n-D"+strings.TrimPrefix(post[moved], "-A")+"\nCOMMIT\n")
			ruleOut, chainOut, err := hd.DeleteByHandle("nat", rules, chains)
			if err != nil {
				t.Fatal(err)
			}
			var left []string // what the caller would delete by content
			for k, o := range ruleOut {
				i := 3 * k
				switch want := host.Deleted; {
				case i >= moved:
					want = host.NotDeleted
					left = append(left, post[i])
					if o != want {
						t.Errorf("rule %d (after the one taken away): %v; want NotDeleted", i, o)
					}
				case o != want:
					t.Errorf("rule %d: %v; want Deleted", i, o)
				}
			}
			for k, o := range chainOut {
				if want := host.Deleted; 3*k >= moved && o != host.NotDeleted || 3*k < moved && o != want {
					t.Errorf("chain %s: %v; want Deleted before id %d, NotDeleted (still jumped to) from it on", chains[k], o, moved)
				}
			}
			after := listNat(t, fam.bin)
			var want []string
			for _, l := range before {
				if l == post[moved] {
					continue // taken away by the test
				}
				if !slices.Contains(gone, l) || slices.Contains(left, l) || keptChainLine(l, moved) {
					want = append(want, l)
				}
			}
			if !slices.Equal(after, want) {
				t.Errorf("after deleting by handle: %d lines, want %d; first differences %q", len(after), len(want), firstDiff(after, want))
			}
		})
	}
}

// keptChainLine reports whether l belongs to the chain of an id from
// moved on, which a jump left in place still needs.
func keptChainLine(l string, moved int) bool {
	var id int
	for _, f := range []string{"-N CNINET-HD-%d", "-A CNINET-HD-%d "} {
		if n, _ := fmt.Sscanf(l, f, &id); n == 1 && !strings.HasPrefix(l, "-A CNINET-HD-POST") {
			return id >= moved
		}
	}
	return false
}

// The plugins' nftables rules listed by nft go by handle over netlink:
// exactly the chosen ones, and not one whose handle changed since.
func TestNFTablesDeletesByHandleExactlyTheChosenRules(t *testing.T) {
	netsandbox.Require(t)
	var in strings.Builder
	in.WriteString("add table ip cninet_hd\nadd chain ip cninet_hd hostports\n")
	for i := range plantedRules {
		fmt.Fprintf(&in, "add rule ip cninet_hd hostports tcp dport %d dnat to 198.18.%d.%d:80 comment \"hd-%d\"\n", 20000+i, 200+i/250, 1+i%250, i)
	}
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(in.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft -f: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("nft", "delete table ip cninet_hd").Run() })
	nft, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	hd, ok := nft.(host.NFTHandleDeleter)
	if !ok {
		t.Fatal("the host's nftables offers no deletion by handle")
	}
	ctx := context.Background()
	table := host.NFTable{Family: "ip", Name: "cninet_hd"}
	before, err := nft.ListRules(ctx, []host.NFTable{table})
	if err != nil || len(before) != plantedRules {
		t.Fatalf("ListRules = %d rules, %v; want %d", len(before), err, plantedRules)
	}
	var chosen []host.NFTRule
	for i := 0; i < len(before); i += 3 {
		chosen = append(chosen, before[i])
	}
	// One chosen rule is deleted and added back as it was: a new handle.
	readded := chosen[7]
	mustRun(t, "nft", "delete", "rule", "ip", "cninet_hd", "hostports", "handle", fmt.Sprint(readded.Handle))
	mustRun(t, "nft", fmt.Sprintf(`add rule ip cninet_hd hostports tcp dport %d dnat to %s:80 comment "%s"`, 20000+21, readded.DNAT, readded.Comment))
	out, err := hd.DeleteByHandle(ctx, table, chosen)
	if err != nil {
		t.Fatal(err)
	}
	for k, o := range out {
		want := host.Deleted
		if k == 7 {
			want = host.NotDeleted
		}
		if o != want {
			t.Errorf("rule %s: %v; want %v", chosen[k], o, want)
		}
	}
	after, err := nft.ListRules(ctx, []host.NFTable{table})
	if err != nil {
		t.Fatal(err)
	}
	var got, want []string
	for _, r := range after {
		got = append(got, r.Comment)
	}
	for i, r := range before {
		if i%3 != 0 || i == 21 {
			want = append(want, r.Comment)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("left %d rules, want %d; first differences %q", len(got), len(want), firstDiff(got, want))
	}
}
