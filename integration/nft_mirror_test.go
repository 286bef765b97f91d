package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/netsandbox"
	"github.com/seed1280861d/cninet/internal/nfnetlink"
	"github.com/seed1280861d/cninet/internal/nftables"
)

// The copy of the rules that nf_tables' notifications keep
// (nfnetlink.Mirror) must answer, right after any change a process
// committed and exited, exactly what the kernel's dumps answer: rules
// added (one by one and in batches), deleted by handle, chains flushed,
// a chain renamed (its rules move without a notification: the copy reads
// the tables again), tables deleted and made again (their handles start
// over), `nft flush ruleset`, changes to tables it does not follow, and
// a burst larger than its queue (which overruns it unless its follower
// keeps up, and then it reads the tables again).
// Past the rules it may hold it refuses, and the default NFTables asks
// the kernel.
func TestTheRulesCopyAnswersWhatTheKernelHoldsAfterEveryChange(t *testing.T) {
	netsandbox.Require(t)
	tables := []string{"inet cninet_copy", "ip cninet_copy", "ip6 cninet_copy"}
	t.Cleanup(func() {
		for _, tb := range append(tables, "ip cninet_other") {
			exec.Command("nft", append([]string{"delete", "table"}, strings.Fields(tb)...)...).Run()
		}
	})
	nft := func(script string) string {
		t.Helper()
		cmd := exec.Command("nft", "-a", "-e", "-f", "-")
		cmd.Stdin = strings.NewReader(script)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("nft -f: %v: %s\n%s", err, out, script)
		}
		return string(out)
	}
	setup := func() {
		var b strings.Builder
		for _, tb := range tables {
			fmt.Fprintf(&b, "add table %s\nadd chain %s hostports\nadd chain %s masquerading\n", tb, tb, tb)
		}
		nft(b.String())
	}
	setup()
	m, err := nfnetlink.OpenMirror()
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	var chains []nfnetlink.Chain
	for _, tb := range tables {
		f := strings.Fields(tb)
		chains = append(chains, nfnetlink.Chain{Family: f[0], Table: f[1], Name: "hostports"}, nfnetlink.Chain{Family: f[0], Table: f[1], Name: "masquerading"})
	}
	comments := map[string]bool{"id-a": true, "id-b": true, "id-c": true}
	ids := []string{"id-a", "id-b", "id-c", "id-z"}
	// compare asks the copy and the kernel; it returns how many rules
	// both found.
	compare := func(step string) int {
		t.Helper()
		got, err := m.Find(chains, comments)
		if err != nil {
			t.Fatalf("%s: the copy: %v", step, err)
		}
		var want []nfnetlink.Rule
		for _, c := range chains {
			rules, err := nfnetlink.FindRules(c.Family, c.Table, []string{c.Name}, comments)
			if err != nil {
				t.Fatalf("%s: the kernel: %v", step, err)
			}
			want = append(want, rules...)
		}
		key := func(rules []nfnetlink.Rule) []string {
			var out []string
			for _, r := range rules {
				out = append(out, fmt.Sprintf("%s %s %s %d %q %x", r.Family, r.Table, r.Chain, r.Handle, r.Comment, r.Expr))
			}
			return out
		}
		if !slices.Equal(key(got), key(want)) {
			t.Fatalf("%s: the copy found %d rules, the kernel %d:\n  copy   %.400q\n  kernel %.400q", step, len(got), len(want), key(got), key(want))
		}
		seen := 0
		if _, err := m.Any(chains, func(nfnetlink.Rule) bool { seen++; return false }); err != nil {
			t.Fatalf("%s: the copy's scan: %v", step, err)
		}
		all := 0
		for _, tb := range tables {
			f := strings.Fields(tb)
			rules, err := nfnetlink.ListRules(f[0], f[1])
			if err != nil {
				t.Fatal(err)
			}
			all += len(rules)
		}
		if seen != all {
			t.Fatalf("%s: the copy's scan saw %d rules, the tables hold %d", step, seen, all)
		}
		return len(got)
	}
	compare("before any rule")

	handleRE := regexp.MustCompile(`# handle (\d+)`)
	rng := rand.New(rand.NewPCG(1, 2))
	type placed struct{ table, chain, handle string }
	var live []placed
	addRules := func(n int) {
		var b strings.Builder
		var where []placed
		for range n {
			tb := tables[rng.IntN(len(tables))]
			chain := []string{"hostports", "masquerading"}[rng.IntN(2)]
			fmt.Fprintf(&b, "add rule %s %s meta mark 0x%x counter comment %q\n", tb, chain, rng.IntN(1000), ids[rng.IntN(len(ids))])
			where = append(where, placed{tb, chain, ""})
		}
		for i, h := range handleRE.FindAllStringSubmatch(nft(b.String()), -1) {
			where[i].handle = h[1]
			live = append(live, where[i])
		}
	}
	reloads := m.Reloads()
	for step := range 150 {
		switch op := rng.IntN(10); {
		case op < 4 || len(live) == 0:
			addRules(1 + rng.IntN(20))
		case op < 8:
			i := rng.IntN(len(live))
			nft(fmt.Sprintf("delete rule %s %s handle %s\n", live[i].table, live[i].chain, live[i].handle))
			live = slices.Delete(live, i, i+1)
		case op == 8:
			tb, chain := tables[rng.IntN(len(tables))], "masquerading"
			nft(fmt.Sprintf("flush chain %s %s\n", tb, chain))
			live = slices.DeleteFunc(live, func(p placed) bool { return p.table == tb && p.chain == chain })
		default:
			nft("add table ip cninet_other\nadd chain ip cninet_other hostports\nadd rule ip cninet_other hostports counter comment \"id-a\"\nflush table ip cninet_other\n")
		}
		compare(fmt.Sprintf("step %d", step))
	}
	if got := m.Reloads(); got != reloads {
		t.Errorf("the copy read the tables %d times more over the single changes, want none: it missed notifications", got-reloads)
	}
	if compare("after the single changes") == 0 {
		t.Fatal("no rule of the comments asked was left: the comparison proves little")
	}

	// A chain renamed moves its rules without a notification about them:
	// the copy reads the tables again.
	nft("rename chain ip cninet_copy masquerading masq-renamed\n")
	compare("a chain renamed")
	if got := m.Reloads(); got != reloads+1 {
		t.Errorf("the copy read the tables %d times more after a chain was renamed, want 1", got-reloads)
	}

	// A table deleted and made again: its handles start over, and its
	// chains are new to the copy, which reads the tables again.
	nft("delete table ip cninet_copy\n")
	live = slices.DeleteFunc(live, func(p placed) bool { return p.table == "ip cninet_copy" })
	setup()
	addRules(30)
	compare("a table deleted and made again")
	nft("flush ruleset\n")
	live = nil
	compare("nft flush ruleset")
	setup()
	compare("the tables made again")
	addRules(30)
	compare("rules in the tables made again")

	// Then, with its chains known again, changes are read from the
	// notifications alone.
	reloads = m.Reloads()
	for step := range 20 {
		addRules(1 + rng.IntN(5))
		nft("add chain ip cninet_copy hostports\n") // as every ADD of portmap does
		compare(fmt.Sprintf("again, step %d", step))
	}
	if got := m.Reloads(); got != reloads {
		t.Errorf("the copy read the tables %d times more over changes to tables whose chains it knows, want none", got-reloads)
	}

	// A burst larger than the queue, in a table it does not follow:
	// 20,000 rules with long comments.
	var b strings.Builder
	b.WriteString("add table ip cninet_other\nadd chain ip cninet_other hostports\n")
	for i := range 20000 {
		fmt.Fprintf(&b, "add rule ip cninet_other hostports meta mark 0x%x counter comment %q\n", i, fmt.Sprintf("id-a-%0120d", i))
	}
	nft(b.String())
	addRules(5)
	compare("after a burst larger than the queue")
	// Whether the queue overran depends on how fast the copy's follower
	// read it; if it did, the tables were read once more.
	if got := m.Reloads(); got > reloads+1 {
		t.Errorf("the copy read the tables %d times more after a burst, want 1 at most", got-reloads)
	} else {
		t.Logf("the queue overran during the burst: %v", got == reloads+1)
	}

	// More rules than a copy may hold: it refuses, and the default
	// NFTables asks the kernel instead.
	b.Reset()
	for i := range 16400 {
		fmt.Fprintf(&b, "add rule ip cninet_copy hostports meta mark 0x%x counter comment \"id-b\"\n", i)
	}
	nft(b.String())
	if _, err := m.Find(chains, comments); err == nil {
		t.Error("the copy answered for tables of more rules than it may hold")
	}
	withCopy, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	asked := []host.NFTChain{{Table: host.NFTable{Family: "ip", Name: "cninet_copy"}, Name: "hostports"}}
	found, err := withCopy.(host.NFTRuleFinder).FindRules(context.Background(), asked, []string{"id-b"})
	if err != nil {
		t.Fatal(err)
	}
	want, err := nfnetlink.FindRules("ip", "cninet_copy", []string{"hostports"}, map[string]bool{"id-b": true})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) != len(want) || len(found) < 16400 {
		t.Errorf("FindRules past the copy's bound found %d rules, the kernel %d; want the same, at least 16,400", len(found), len(want))
	}
}

// The default NFTables answers a search by comment and a scan from its
// copy of the rules just as the kernel's dumps do, from the first
// question on.
func TestTheDefaultNFTablesAnswersFromItsCopyAsTheKernelDoes(t *testing.T) {
	netsandbox.Require(t)
	t.Cleanup(func() { exec.Command("nft", "delete", "table", "ip", "cninet_copy2").Run() })
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader("add table ip cninet_copy2\nadd chain ip cninet_copy2 hostports\n" +
		"add rule ip cninet_copy2 hostports ip daddr 198.18.90.2 counter comment \"id-a\"\n" +
		"add rule ip cninet_copy2 hostports ip daddr 198.18.90.3 counter comment \"id-b\"\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft -f: %v: %s", err, out)
	}
	withCopy, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	kernel, err := nftables.NewWithoutCopy()
	if err != nil {
		t.Fatal(err)
	}
	table := host.NFTable{Family: "ip", Name: "cninet_copy2"}
	chains := []host.NFTChain{{Table: table, Name: "hostports"}}
	for round := range 2 {
		var answers [2][]string
		for i, n := range []host.NFTables{withCopy, kernel} {
			found, err := n.(host.NFTRuleFinder).FindRules(context.Background(), chains, []string{"id-a"})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range found {
				answers[i] = append(answers[i], fmt.Sprintf("%v %s %d %q %x", r.Table, r.Chain, r.Handle, r.Comment, r.Raw))
			}
			any, err := n.(host.NFTRuleMatcher).AnyRule(context.Background(), []host.NFTable{table}, func(r host.NFTRuleSketch) bool {
				return r.Comment == "id-b" && r.Table == table && r.Chain == "hostports"
			})
			if err != nil || !any {
				t.Errorf("round %d: AnyRule = %v, %v; want the rule of id-b found", round, any, err)
			}
		}
		if len(answers[0]) != round+1 || !slices.Equal(answers[0], answers[1]) {
			t.Errorf("round %d: the copy found %q, the kernel %q; want the %d rules of id-a from both", round, answers[0], answers[1], round+1)
		}
		exec.Command("nft", "add", "rule", "ip", "cninet_copy2", "hostports", "counter", "comment", `"id-a"`).Run()
	}
}
