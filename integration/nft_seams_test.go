package integration

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"sigs.k8s.io/knftables"

	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/netsandbox"
	"github.com/seed1280861d/cninet/internal/nftables"
)

// seamScripts are transactions in the shapes the plugins' nftables
// backends write (portmap's hostport chains and DNAT, the bridge's
// masquerade), rendered by knftables as the plugins render theirs, in
// tables of the test's own.
func seamScripts() []string {
	hp := knftables.NewFake(knftables.IPv4Family, "cninet_seams_hostport").NewTransaction()
	hp.Add(&knftables.Table{Comment: knftables.PtrTo("CNI portmap plugin")})
	for _, c := range []string{"hostports", "hostip_hostports", "hostports_all"} {
		hp.Add(&knftables.Chain{Name: c})
	}
	hp.Flush(&knftables.Chain{Name: "hostports_all"})
	hp.Add(&knftables.Rule{Chain: "hostports_all", Rule: "jump hostip_hostports"})
	hp.Add(&knftables.Rule{Chain: "hostports_all", Rule: "jump hostports"})
	hp.Add(&knftables.Chain{Name: "prerouting", Type: knftables.PtrTo(knftables.NATType),
		Hook: knftables.PtrTo(knftables.PreroutingHook), Priority: knftables.PtrTo(knftables.DNATPriority)})
	hp.Flush(&knftables.Chain{Name: "prerouting"})
	hp.Add(&knftables.Rule{Chain: "prerouting", Rule: "fib daddr type local jump hostports_all"})
	hp.Add(&knftables.Chain{Name: "masquerading", Type: knftables.PtrTo(knftables.NATType),
		Hook: knftables.PtrTo(knftables.PostroutingHook), Priority: knftables.PtrTo(knftables.SNATPriority)})
	hp.Add(&knftables.Rule{Chain: "hostports", Rule: "tcp dport 28084 dnat to 198.18.1.2:80", Comment: knftables.PtrTo("web-1")})
	hp.Add(&knftables.Rule{Chain: "hostports", Rule: "ip daddr 198.18.0.1 udp dport 5353 dnat to 198.18.1.2:53", Comment: knftables.PtrTo("web-1")})
	hp.Add(&knftables.Rule{Chain: "hostports", Rule: "th dport 99 dnat to 198.18.1.3", Comment: knftables.PtrTo("web-2")})
	hp.Add(&knftables.Rule{Chain: "masquerading", Rule: "ip saddr 198.18.1.2 ip daddr 198.18.1.2 masquerade", Comment: knftables.PtrTo("web-1")})
	hp.Add(&knftables.Rule{Chain: "masquerading", Rule: "ip saddr 127.0.0.1 ip daddr 198.18.1.2 masquerade", Comment: knftables.PtrTo("web-1")})

	masq := knftables.NewFake(knftables.InetFamily, "cninet_seams_masq").NewTransaction()
	masq.Add(&knftables.Table{})
	masq.Add(&knftables.Chain{Name: "masq_checks", Comment: knftables.PtrTo("Masquerade traffic from certain IPs to any (non-multicast) IP outside their subnet")})
	masq.Add(&knftables.Chain{Name: "postrouting", Type: knftables.PtrTo(knftables.NATType),
		Hook: knftables.PtrTo(knftables.PostroutingHook), Priority: knftables.PtrTo(knftables.SNATPriority)})
	masq.Flush(&knftables.Chain{Name: "postrouting"})
	masq.Add(&knftables.Rule{Chain: "postrouting", Rule: "ip daddr == 224.0.0.0/4  return"})
	masq.Add(&knftables.Rule{Chain: "postrouting", Rule: "ip6 daddr == ff00::/8  return"})
	masq.Add(&knftables.Rule{Chain: "postrouting", Rule: "ip daddr 198.18.3.0/24 return"})
	masq.Add(&knftables.Rule{Chain: "postrouting", Rule: "goto masq_checks"})
	masq.Add(&knftables.Rule{Chain: "masq_checks", Rule: "ip saddr == 198.18.1.2 ip daddr != 198.18.1.0/24 masquerade",
		Comment: knftables.PtrTo("0123456789abcdef-fedcba9876543210, net: n, if: eth0, id: web-1")})
	masq.Add(&knftables.Rule{Chain: "masq_checks", Rule: "ip6 saddr == fd00:198:18::2 ip6 daddr != fd00:198:18::/64 masquerade",
		Comment: knftables.PtrTo("0123456789abcdef-fedcba9876543210, net: n, if: eth0, id: web-1")})
	masq.Add(&knftables.Rule{Chain: "masq_checks", Rule: "tcp dport != 80 ip saddr != 198.18.1.5 ip daddr != 198.18.1.6 accept"})
	masq.Add(&knftables.Rule{Chain: "masq_checks", Rule: "accept"})
	masq.Add(&knftables.Rule{Chain: "masq_checks", Rule: "drop"})
	return []string{hp.String(), masq.String()}
}

var seamTables = []host.NFTable{{Family: "ip", Name: "cninet_seams_hostport"}, {Family: "inet", Name: "cninet_seams_masq"}}

// sayings is what each rule of a listing tells, handles aside (nft
// numbers chains too, the fake rules alone), sorted.
func sayings(rules []host.NFTRule) []string {
	out := make([]string, len(rules))
	for i, r := range rules {
		r.Handle = 0
		out[i] = told(r)
	}
	slices.Sort(out)
	return out
}

// The plugins' nftables rules, written with a script through the host's
// NFTables (nft -f), read the same over netlink, in nft's JSON and in
// the fake NFTables given the same scripts: their ports, DNAT ports,
// verdicts and jump targets included.
func TestNFTScriptsListAlikeOverNetlinkInNftAndInTheFake(t *testing.T) {
	netsandbox.Require(t)
	nft, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, tb := range seamTables {
			exec.Command("nft", "delete", "table", tb.Family, tb.Name).Run()
		}
	})
	runner := nft.(host.NFTScriptRunner)
	fake := &fakes.NFTables{}
	for _, script := range seamScripts() {
		if err := runner.RunScript(ctxFor(t, time.Minute), script); err != nil {
			t.Fatalf("RunScript:\n%s\n%v", script, err)
		}
		if err := fake.RunScript(context.Background(), script); err != nil {
			t.Fatalf("the fake's RunScript:\n%s\n%v", script, err)
		}
	}
	overNetlink, err := nft.ListRules(context.Background(), seamTables)
	if err != nil {
		t.Fatal(err)
	}
	compareListings(t, overNetlink, nftJSONListing(t, seamTables))
	inFake, err := fake.ListRules(context.Background(), seamTables)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := sayings(inFake), sayings(overNetlink); !slices.Equal(got, want) {
		t.Errorf("the fake reads the scripts otherwise than nf_tables lists them:\n  fake %q\n  nft  %q", got, want)
	}
	var dnat, jumps, gotos, returns bool
	for _, r := range overNetlink {
		dnat = dnat || r.DPort == 28084 && r.DNATPort == 80 && r.DNAT == netipMust("198.18.1.2") && r.Comment == "web-1"
		jumps = jumps || r.Verdict == "jump" && r.Target == "hostports_all" && r.Chain == "prerouting"
		gotos = gotos || r.Verdict == "goto" && r.Target == "masq_checks"
		returns = returns || r.Verdict == "return" && r.Chain == "postrouting"
	}
	if !dnat || !jumps || !gotos || !returns {
		t.Errorf("listed: tcp dport 28084 dnat to 198.18.1.2:80 %v, jump hostports_all %v, goto masq_checks %v, return %v; want all:\n%q",
			dnat, jumps, gotos, returns, sayings(overNetlink))
	}
}

// A script is one transaction: a line nft refuses leaves nothing of the
// lines before it, and the error says what nft said.
func TestNFTRunScriptIsAllOrNothing(t *testing.T) {
	netsandbox.Require(t)
	nft, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exec.Command("nft", "delete", "table", "ip", "cninet_seams_tx").Run() })
	runner := nft.(host.NFTScriptRunner)
	mustRun(t, "nft", "add table ip cninet_seams_tx; add chain ip cninet_seams_tx c")
	err = runner.RunScript(ctxFor(t, time.Minute), "add rule ip cninet_seams_tx c tcp dport 1 accept\nadd rule ip cninet_seams_tx nosuch tcp dport 2 accept\n")
	if err == nil || !strings.Contains(err.Error(), "Error:") || !strings.Contains(err.Error(), "nosuch") {
		t.Fatalf("RunScript = %v; want nft's error naming the chain that is not there", err)
	}
	rules, err := nft.ListRules(context.Background(), []host.NFTable{{Family: "ip", Name: "cninet_seams_tx"}})
	if err != nil || len(rules) != 0 {
		t.Errorf("after the refused script: %d rules (%v), want none", len(rules), err)
	}
}

// nf_tables tells a watcher of every change of its network namespace,
// by nft or iptables-nft, and of nothing else; the watcher signals those
// that remove something (a deletion, a replacement, a flush), never an
// addition; the watching ends with its context, its socket first.
func TestNFTChangeWatcherSignalsEachRemovalInItsNamespace(t *testing.T) {
	netsandbox.Require(t)
	nft, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	w := netsandbox.NewWorkload(t) // the namespace watched: nothing else changes it
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var changes <-chan struct{}
	if err := w.NS.Do(func(ns.NetNS) error {
		var err error
		changes, err = nft.(host.NFTChangeWatcher).WatchChanges(ctx)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	in := func(args ...string) { mustRun(t, "nsenter", append([]string{"--net=" + w.Path}, args...)...) }
	signalled := func(what string) {
		t.Helper()
		select {
		case _, open := <-changes:
			if !open {
				t.Fatalf("%s: the channel was closed", what)
			}
		case <-time.After(time.Second):
			t.Fatalf("no signal within a second of %s", what)
		}
		// The rest of the burst (a transaction is several notifications).
		for quiet := false; !quiet; {
			select {
			case <-changes:
			case <-time.After(200 * time.Millisecond):
				quiet = true
			}
		}
	}
	silent := func(what string) {
		t.Helper()
		select {
		case <-changes:
			t.Fatalf("a signal while %s", what)
		case <-time.After(500 * time.Millisecond):
		}
	}
	if !watching(t, w.Path) {
		t.Fatal("no socket of the namespace is in nf_tables' group")
	}
	silent("nothing changed")
	in("nft", "add table ip cninet_watch; add chain ip cninet_watch c; add rule ip cninet_watch c tcp dport 1 accept")
	silent("nft added a table, a chain and a rule (nothing removed)")
	in("iptables", "-w", "-A", "FORWARD", "-s", "198.18.250.1/32", "-j", "ACCEPT")
	in("iptables", "-w", "-A", "FORWARD", "-s", "198.18.250.2/32", "-j", "ACCEPT")
	silent("iptables-nft appended rules")
	in("iptables", "-w", "-D", "FORWARD", "-s", "198.18.250.1/32", "-j", "ACCEPT")
	signalled("iptables-nft -D")
	in("iptables", "-w", "-R", "FORWARD", "1", "-s", "198.18.250.3/32", "-j", "ACCEPT")
	signalled("iptables-nft -R (the old rule deleted)")
	in("iptables", "-w", "-F", "FORWARD")
	signalled("iptables-nft -F")
	in("nft", "flush chain ip cninet_watch c")
	signalled("nft flush chain")
	in("nft", "flush ruleset")
	signalled("nft flush ruleset")
	mustRun(t, "nft", "add table ip cninet_watch_elsewhere")
	mustRun(t, "nft", "delete table ip cninet_watch_elsewhere")
	silent("another namespace changed")

	cancel()
	deadline := time.After(time.Second)
	for open := true; open; {
		select {
		case _, open = <-changes:
		case <-deadline:
			t.Fatal("the channel is still open a second after its context ended")
		}
	}
	if watching(t, w.Path) {
		t.Error("the channel is closed, but the socket is still open")
	}
}

// watching reports whether a netfilter netlink socket of the namespace
// at path is in nf_tables' multicast group, as /proc/net/netlink lists
// it there: protocol 12, groups bit 7 (0x40).
func watching(t *testing.T, path string) bool {
	t.Helper()
	out, err := exec.Command("nsenter", "--net="+path, "cat", "/proc/net/netlink").Output()
	if err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || f[1] != "12" {
			continue
		}
		var groups uint32
		if _, err := fmt.Sscanf(f[3], "%x", &groups); err == nil && groups&0x40 != 0 {
			return true
		}
	}
	return false
}
