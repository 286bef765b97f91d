package integration

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/iptables"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// What a repair writes through the host's iptables (host.RuleWriter)
// is what iptables itself says and lists, on iptables-nft (this host's
// default) and on iptables-legacy (in a process of its own); and the
// fake IPTables stores the rule spec as iptables lists it.
func TestIPTablesRuleWriterAgreesWithIPTables(t *testing.T) {
	netsandbox.Require(t)
	if os.Getenv(legacyEnv) == "" {
		ruleWriterAgrees(t, true)
	}
	t.Run("iptables-legacy", func(t *testing.T) {
		if os.Getenv(legacyEnv) == "" {
			runOnIPTablesLegacy(t)
			return
		}
		ruleWriterAgrees(t, false)
	})
}

func ruleWriterAgrees(t *testing.T, onNFTables bool) {
	for _, fam := range []struct {
		bin       string
		v6        bool
		src, dst  string
		net, lone string
	}{{"iptables", false, "198.18.250.5/32", "198.18.250.6/32", "198.18.250.0/24", "198.18.250.7"},
		{"ip6tables", true, "fd00:198:18::5/128", "fd00:198:18::6/128", "fd00:198:18::/64", "fd00:198:18::7"}} {
		t.Run(fam.bin, func(t *testing.T) {
			ipt, err := iptables.New(fam.v6)
			if err != nil {
				t.Fatal(err)
			}
			if _, probes := ipt.(host.ChainProber); probes != onNFTables {
				t.Fatalf("%s on nf_tables: %v, want %v", fam.bin, probes, onNFTables)
			}
			w, ok := iptables.BindContext(ctxFor(t, time.Minute), ipt).(host.RuleWriter)
			if !ok {
				t.Fatal("the host's IPTables, bound, offers no RuleWriter")
			}
			const chain, absent = "CNINET-RW-TEST", "CNINET-RW-NOPE"
			t.Cleanup(func() {
				exec.Command(fam.bin, "-w", "-t", "nat", "-F", chain).Run()
				exec.Command(fam.bin, "-w", "-t", "nat", "-X", chain).Run()
			})
			lists := func(table, chain string) bool {
				return exec.Command(fam.bin, "-w", "-t", table, "-S", chain).Run() == nil
			}
			exists := func(table, chain string) {
				t.Helper()
				got, err := w.ChainExists(table, chain)
				if err != nil || got != lists(table, chain) {
					t.Errorf("ChainExists(%s, %s) = %v, %v; iptables -S lists it: %v", table, chain, got, err, lists(table, chain))
				}
			}
			for _, c := range []string{"POSTROUTING", "PREROUTING", chain, absent} {
				exists("nat", c)
			}
			if err := w.NewChain("nat", chain); err != nil {
				t.Fatal(err)
			}
			exists("nat", chain)
			if err := w.NewChain("nat", chain); err == nil {
				t.Error("NewChain of a chain that exists: no error")
			}

			masq := []string{"-s", fam.src, "-m", "comment", "--comment", `name: "n" id: "web-1"`, "-j", "MASQUERADE"}
			accept := []string{"-d", fam.dst, "-j", "ACCEPT"}
			// In the bridge plugin's words (the target before the comment, a
			// lone address), which iptables lists in its own order.
			pluginWords := []string{"!", "-d", fam.net, "-j", "ACCEPT", "-m", "comment", "--comment", `name: "n" id: "web-1"`}
			lone := []string{"-s", fam.lone, "-p", "tcp", "--dport", "8080", "-j", "ACCEPT"}
			check := func(chain string, spec []string, want bool) {
				t.Helper()
				if got, err := w.Exists("nat", chain, spec...); err != nil || got != want {
					t.Errorf("Exists(nat, %s, %q) = %v, %v; want %v", chain, spec, got, err, want)
				}
			}
			check(chain, masq, false)
			check(absent, masq, false)
			if err := w.Append("nat", chain, masq...); err != nil {
				t.Fatal(err)
			}
			if err := w.Insert("nat", chain, 1, accept...); err != nil {
				t.Fatal(err)
			}
			for _, spec := range [][]string{pluginWords, lone} {
				if err := w.Append("nat", chain, spec...); err != nil {
					t.Fatal(err)
				}
			}
			check(chain, masq, true)
			check(chain, accept, true)
			check(chain, pluginWords, true)
			check(chain, lone, true)
			if _, err := w.Exists("nat", chain, "-m", "cninet-no-such-match", "-j", "ACCEPT"); err == nil {
				t.Error("Exists of a spec iptables cannot read: no error (it is not an absent rule)")
			}
			out, err := exec.Command(fam.bin, "-w", "-t", "nat", "-S", chain).Output()
			if err != nil {
				t.Fatal(err)
			}
			want := []string{"-N " + chain}
			for _, spec := range [][]string{accept, masq, pluginWords, lone} {
				want = append(want, "-A "+chain+" "+fakes.FormatRule(spec))
			}
			fake := fakes.NewIPTables().Load("nat", "-N "+chain)
			for _, spec := range [][]string{masq, pluginWords, lone} {
				if err := fake.Append("nat", chain, spec...); err != nil {
					t.Fatal(err)
				}
			}
			if err := fake.Insert("nat", chain, 1, accept...); err != nil {
				t.Fatal(err)
			}
			for _, spec := range [][]string{accept, masq, pluginWords, lone} {
				if ok, err := fake.Exists("nat", chain, spec...); !ok || err != nil {
					t.Errorf("the fake's Exists(%q) = %v, %v; iptables -C finds it", spec, ok, err)
				}
			}
			if got := strings.Split(strings.TrimSpace(string(out)), "\n"); !slices.Equal(got, want) {
				t.Errorf("iptables -S lists\n  %q\nwant (the fake's form)\n  %q", got, want)
			}
			if got := strings.Split(strings.TrimSpace(fake.Save("nat")), "\n"); !slices.Contains(got, want[1]) || !slices.Equal(fake.Rules("nat", chain), want[1:]) {
				t.Errorf("the fake holds %q\nwant %q", fake.Rules("nat", chain), want[1:])
			}
		})
	}
}
