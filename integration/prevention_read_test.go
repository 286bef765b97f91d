package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/netsandbox"
	"github.com/seed1280861d/cninet/internal/nftables"
)

// The search by comment (host.NFTRuleFinder) of the default NFTables must
// find, in the chains asked, exactly the rules a scan of the whole tables
// finds there with those comments: over several datagrams, in ip, ip6 and
// inet tables, and nothing of the other chains or of a comment that only
// begins like one asked.
func TestFindRulesOverNetlinkFindsWhatAScanOfTheTablesFinds(t *testing.T) {
	netsandbox.Require(t)
	tables := []host.NFTable{{Family: "ip", Name: "cninet_find"}, {Family: "ip6", Name: "cninet_find"}, {Family: "inet", Name: "cninet_find"}}
	t.Cleanup(func() {
		for _, tb := range tables {
			exec.Command("nft", "delete", "table", tb.Family, tb.Name).Run()
		}
	})
	var script strings.Builder
	for _, tb := range tables {
		fmt.Fprintf(&script, "add table %s\nadd chain %s hostports\nadd chain %s masquerading\nadd chain %s other\n", tb, tb, tb, tb)
	}
	comments := []string{"id-a", "id-b", "id-ab", "id-a ", "i"}
	for i := range 600 { // a few hundred rules each: a dump of several datagrams
		c := comments[i%len(comments)]
		fmt.Fprintf(&script, "add rule ip cninet_find hostports tcp dport %d dnat to 198.18.80.%d:80 comment %q\n", 20000+i, i%250+1, c)
		fmt.Fprintf(&script, "add rule ip6 cninet_find masquerading ip6 saddr fd00:198:18:80::%x ip6 daddr fd00:198:18:80::%x masquerade comment %q\n", i+1, i+1, c)
		fmt.Fprintf(&script, "add rule inet cninet_find other ip saddr 198.18.81.%d masquerade comment %q\n", i%250+1, c)
	}
	fmt.Fprintf(&script, "add rule ip cninet_find masquerading ip saddr 198.18.82.1 masquerade\n") // no comment
	cmd := exec.Command("nft", "-f", "-")
	cmd.Stdin = strings.NewReader(script.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft -f: %v: %s", err, out)
	}
	nft, err := nftables.New()
	if err != nil {
		t.Fatal(err)
	}
	chains := []host.NFTChain{{Table: tables[0], Name: "hostports"}, {Table: tables[0], Name: "masquerading"},
		{Table: tables[1], Name: "hostports"}, {Table: tables[1], Name: "masquerading"}, {Table: tables[2], Name: "hostports"}}
	asked := []string{"id-a", "id-b"}
	key := func(r host.NFTRuleSketch) string {
		return fmt.Sprintf("%s %s %d %q %x", r.Table, r.Chain, r.Handle, r.Comment, r.Raw)
	}
	var want []string
	if _, err := nft.(host.NFTRuleMatcher).AnyRule(context.Background(), tables, func(r host.NFTRuleSketch) bool {
		if slices.Contains(chains, host.NFTChain{Table: r.Table, Name: r.Chain}) && slices.Contains(asked, r.Comment) {
			want = append(want, key(r))
		}
		return false
	}); err != nil {
		t.Fatal(err)
	}
	found, err := nft.(host.NFTRuleFinder).FindRules(context.Background(), chains, asked)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range found {
		got = append(got, key(r))
	}
	slices.Sort(got)
	slices.Sort(want)
	if len(want) != 480 { // 600 rules of each chain, 2 in 5 of them asked: ip hostports and ip6 masquerading
		t.Fatalf("the scan found %d rules of the comments asked in the chains asked, want 480", len(want))
	}
	if !slices.Equal(got, want) {
		t.Errorf("FindRules found %d rules, the scan %d; first difference:\n  got  %.200q\n  want %.200q", len(got), len(want), got, want)
	}
}

// BenchmarkPreventionNFTRead times a Teardown's prevention before its DEL
// (Cleaner.Prevent with RecheckByHandle, as a settled Teardown runs it) on
// a host holding one attachment of portmap and bridge on nftables and 0,
// 250 or 1,000 others (seven rules each, as the bench writes them), read
// three ways side by side: a scan of the three plugin tables (the
// NFTables without NFTRuleFinder), a search by comment in the chains
// (nf_tables dumps each chain whole), and the copy of the rules that
// nf_tables' notifications keep, which reads nothing of the kernel while
// nothing changes; "with a change" adds and deletes an unrelated rule of
// the plugins' tables before each prevention, outside the timing, so
// that the copy has two notifications to read. copy-heap-B is the heap a
// fresh copy holds once it has read the tables. user-ns/op and sys-ns/op split the process's CPU: what the kernel
// spends encoding the rules it dumps is sys.
//
//	go test -run '^$' -bench BenchmarkPreventionNFTRead -benchtime 100x ./integration/
func BenchmarkPreventionNFTRead(b *testing.B) {
	netsandbox.Require(b)
	b.Cleanup(func() {
		for _, t := range []string{"inet cni_plugins_masquerade", "ip cni_hostport", "ip6 cni_hostport"} {
			exec.Command("nft", append([]string{"delete", "table"}, strings.Fields(t)...)...).Run()
		}
	})
	dir := b.TempDir()
	const network, id = "benchnet", "bench-own"
	own4, own6 := netip.MustParseAddr("198.18.200.2"), netip.MustParseAddr("fd00:198:18:c8::2")
	for path, data := range map[string]string{
		filepath.Join(dir, "ipam", network, own4.String()):             id + "\r\neth0",
		filepath.Join(dir, "ipam", network, own6.String()):             id + "\r\neth0",
		filepath.Join(dir, "cache", "results", network+"-"+id+"-eth0"): cachedResultJSON(b, network, id, own4, own6),
	} {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	net := footprint.Network{Name: network, IfName: "eth0", IPAMDirs: []string{filepath.Join(dir, "ipam", network)},
		CacheDir: filepath.Join(dir, "cache"), HostportNFT: true}
	var script strings.Builder
	script.WriteString(`add table inet cni_plugins_masquerade
add chain inet cni_plugins_masquerade masq_checks
add chain inet cni_plugins_masquerade benchchange
add table ip cni_hostport
add chain ip cni_hostport hostports
add chain ip cni_hostport hostip_hostports
add chain ip cni_hostport masquerading { type nat hook postrouting priority srcnat ; }
add table ip6 cni_hostport
add chain ip6 cni_hostport hostports
add chain ip6 cni_hostport hostip_hostports
add chain ip6 cni_hostport masquerading { type nat hook postrouting priority srcnat ; }
`)
	writeAttachment := func(a footprint.Attachment, ip4, ip6 netip.Addr, port int) {
		masq := a.NFTMasqComment("eth0")
		fmt.Fprintf(&script, "add rule inet cni_plugins_masquerade masq_checks ip saddr %s ip daddr != 198.18.0.0/16 masquerade comment %q\n", ip4, masq)
		fmt.Fprintf(&script, "add rule inet cni_plugins_masquerade masq_checks ip6 saddr %s ip6 daddr != fd00:198:18::/48 masquerade comment %q\n", ip6, masq)
		fmt.Fprintf(&script, "add rule ip cni_hostport hostports tcp dport %d dnat to %s:8080 comment %q\n", port, ip4, a.ID)
		fmt.Fprintf(&script, "add rule ip6 cni_hostport hostports tcp dport %d dnat to [%s]:8080 comment %q\n", port, ip6, a.ID)
		fmt.Fprintf(&script, "add rule ip cni_hostport masquerading ip saddr %s ip daddr %s masquerade comment %q\n", ip4, ip4, a.ID)
		fmt.Fprintf(&script, "add rule ip cni_hostport masquerading ip saddr 127.0.0.1 ip daddr %s masquerade comment %q\n", ip4, a.ID)
		fmt.Fprintf(&script, "add rule ip6 cni_hostport masquerading ip6 saddr %s ip6 daddr %s masquerade comment %q\n", ip6, ip6, a.ID)
	}
	writeAttachment(footprint.Attachment{Network: network, ID: id}, own4, own6, 19999)
	nft, err := nftables.New()
	if err != nil {
		b.Fatal(err)
	}
	kernel, err := nftables.NewWithoutCopy()
	if err != nil {
		b.Fatal(err)
	}
	readers := []struct {
		name   string
		nft    host.NFTables
		change bool
	}{
		{"scan of the tables", scanningNFT{kernel}, false},
		{"search by comment in the kernel (before)", kernel, false},
		{"copy kept by notifications (after)", nft, false},
		{"copy kept by notifications, with a change (after)", nft, true},
	}
	change := func() {
		cmd := exec.Command("nft", "-f", "-")
		cmd.Stdin = strings.NewReader("flush chain inet cni_plugins_masquerade benchchange\n" +
			"add rule inet cni_plugins_masquerade benchchange ip saddr 198.18.250.1 counter\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("nft -f: %v: %s", err, out)
		}
	}
	present := 0
	for _, others := range []int{0, 250, 1000} {
		for i := present; i < others; i++ {
			ip4 := netip.AddrFrom4([4]byte{198, 18, byte(i / 250), byte(2 + i%250)})
			ip6 := netip.AddrFrom16([16]byte{0xfd, 0, 1, 0x98, 0, 0x18, 0, 0, 0, 0, 0, 0, 0, 0, byte(i >> 8), byte(i)})
			writeAttachment(footprint.Attachment{Network: fmt.Sprintf("other-%d", i%4), ID: fmt.Sprintf("%064x", i)}, ip4, ip6, 20000+i)
		}
		present = others
		cmd := exec.Command("nft", "-f", "-")
		cmd.Stdin = strings.NewReader(script.String())
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("nft -f: %v: %s", err, out)
		}
		script.Reset()
		copyHeap := heapOfACopy(b)
		for _, r := range readers {
			b.Run(fmt.Sprintf("%d others/%s", others, r.name), func(b *testing.B) {
				seams := footprint.Seams{
					IPTables: func(bool) (host.IPTables, error) { return fakes.NewIPTables(), nil },
					NFTables: func() (host.NFTables, error) { return r.nft, nil },
				}
				u0, s0 := processCPU()
				var uChange, sChange time.Duration
				for b.Loop() {
					if r.change {
						b.StopTimer()
						cu, cs := processCPU()
						change()
						cu1, cs1 := processCPU()
						uChange, sChange = uChange+cu1-cu, sChange+cs1-cs
						b.StartTimer()
					}
					cl := footprint.NewCleaner(context.Background(), net, seams)
					cl.RecheckByHandle = true
					p, err := cl.Prevent([]string{id})
					if err != nil || len(p.Omit) > 0 {
						b.Fatalf("Prevent = %+v, %v; want nothing left out", p, err)
					}
				}
				u1, s1 := processCPU()
				b.ReportMetric(float64(u1-u0-uChange)/float64(b.N), "user-ns/op")
				b.ReportMetric(float64(s1-s0-sChange)/float64(b.N), "sys-ns/op")
				if r.nft == nft {
					b.ReportMetric(float64(copyHeap), "copy-heap-B")
				}
			})
		}
	}
}

// heapOfACopy returns the heap that a fresh copy of the plugins' tables
// holds once it has answered a question.
func heapOfACopy(b *testing.B) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	nft, err := nftables.New()
	if err != nil {
		b.Fatal(err)
	}
	tables := []host.NFTable{{Family: "inet", Name: "cni_plugins_masquerade"}, {Family: "ip", Name: "cni_hostport"}, {Family: "ip6", Name: "cni_hostport"}}
	if _, err := nft.(host.NFTRuleMatcher).AnyRule(context.Background(), tables, func(host.NFTRuleSketch) bool { return false }); err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(nft)
	return after.HeapAlloc - min(before.HeapAlloc, after.HeapAlloc)
}

// scanningNFT is the default NFTables without its search by comment
// (NFTRuleFinder): the prevention scans the tables whole, as it did
// before.
type scanningNFT struct{ nft host.NFTables }

func (s scanningNFT) ListRules(ctx context.Context, tables []host.NFTable) ([]host.NFTRule, error) {
	return s.nft.ListRules(ctx, tables)
}

func (s scanningNFT) DeleteRules(ctx context.Context, table host.NFTable, rules []host.NFTRule) error {
	return s.nft.DeleteRules(ctx, table, rules)
}

func (s scanningNFT) AnyRule(ctx context.Context, tables []host.NFTable, match func(host.NFTRuleSketch) bool) (bool, error) {
	return s.nft.(host.NFTRuleMatcher).AnyRule(ctx, tables, match)
}

func (s scanningNFT) LookupRule(ctx context.Context, table host.NFTable, chain string, handle int) (host.NFTRuleSketch, bool, error) {
	return s.nft.(host.NFTRuleLookup).LookupRule(ctx, table, chain, handle)
}

// processCPU is the CPU the process has used, in user space and in the
// kernel.
func processCPU() (user, sys time.Duration) {
	var u syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &u)
	return time.Duration(u.Utime.Nano()), time.Duration(u.Stime.Nano())
}

// cachedResultJSON is libcni's cached result of an attachment with ip4
// and ip6.
func cachedResultJSON(b *testing.B, network, id string, ip4, ip6 netip.Addr) string {
	raw, err := json.Marshal(map[string]any{"kind": "cniCacheV1", "containerId": id, "ifName": "eth0", "networkName": network,
		"result": map[string]any{"cniVersion": "1.0.0", "ips": []map[string]string{{"address": ip4.String() + "/16"}, {"address": ip6.String() + "/64"}}}})
	if err != nil {
		b.Fatal(err)
	}
	return string(raw)
}
