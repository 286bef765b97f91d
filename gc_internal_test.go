package cninet

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/gc"
)

func TestGCNeverCollectsAnAllocationBeingSetUp(t *testing.T) {
	o := footprint.Attachment{Network: "cninet-unit", ID: "busy"}
	ipt := fakes.NewIPTables().Load("nat", fmt.Sprintf("-N %s\n-A POSTROUTING -s 198.18.0.2/32 %s\n",
		o.MasqChain(), fakes.FormatRule([]string{"-m", "comment", "--comment", o.MasqComment(), "-j", o.MasqChain()})))
	entered, release := make(chan struct{}), make(chan struct{})
	fake := &fakes.CNI{SetupHook: func(ctx context.Context, id string) error {
		close(entered)
		<-release
		return nil
	}}
	conf := []byte(`{"cniVersion":"1.0.0","name":"cninet-unit","plugins":[{"type":"bridge"}]}`)
	c, err := New(Config{ConfList: conf, CNI: fake, IPTables: func(bool) (host.IPTables, error) { return ipt, nil }, CacheDir: t.TempDir(), StateDir: t.TempDir(),
		NFTables: func() (host.NFTables, error) { return &fakes.NFTables{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
	setupDone := make(chan error, 1)
	go func() {
		_, err := c.Setup(context.Background(), &Allocation{ID: "busy"}, "/var/run/netns/busy")
		setupDone <- err
	}()
	<-entered
	gcDone := make(chan error, 1)
	go func() {
		_, err := c.GC(context.Background(), []string{})
		gcDone <- err
	}()
	for !gcActive(c) {
		time.Sleep(time.Millisecond)
	}
	close(release)
	if err := <-setupDone; err != nil {
		t.Fatal(err)
	}
	if err := <-gcDone; err != nil {
		t.Fatal(err)
	}
	if !ipt.HasChain("nat", o.MasqChain()) || len(ipt.Rules("nat", "POSTROUTING")) != 1 {
		t.Fatal("GC collected an allocation that was being set up when it started")
	}
	if _, err := c.GC(context.Background(), []string{}); err != nil {
		t.Fatal(err)
	}
	if ipt.HasChain("nat", o.MasqChain()) {
		t.Fatal("a later GC, with the allocation idle and not live, left it")
	}
}

func gcActive(c *Configurator) bool {
	return c.registry.Admission.GCRunning()
}

// acceptAllPlugins writes plugins that answer VERSION and succeed at
// everything else without doing anything, so that libcni's GC can DEL.
func acceptAllPlugins(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	script := "#!/bin/sh\n[ \"$CNI_COMMAND\" = VERSION ] && echo '{\"cniVersion\":\"1.0.0\",\"supportedVersions\":[\"0.4.0\",\"1.0.0\"]}'\nexit 0\n"
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// cache writes libcni's cached result of (network, id, ifName).
func (f multiFixture) writeCache(t *testing.T, network, id, ifName string) string {
	t.Helper()
	path := filepath.Join(f.cache, "results", fmt.Sprintf("%s-%s-%s", network, id, ifName))
	body := fmt.Sprintf(`{"kind":"cniCacheV1","containerId":%q,"ifName":%q,"networkName":%q,"netns":"/gone","config":"e30="}`, id, ifName, network)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func nftMasq(network, id, ifName, addr string, handle int) host.NFTRule {
	return host.NFTRule{Family: "inet", Table: "cni_plugins_masquerade", Chain: "masq_checks", Handle: handle,
		Comment: footprint.Attachment{Network: network, ID: id}.NFTMasqComment(ifName), Saddr: netip.MustParseAddr(addr)}
}

func TestGCSweepsEveryNetworkAndKeepsALiveWorkloadUnderEveryInterfaceName(t *testing.T) {
	f := newMultiFixture(t, quickRetry, acceptAllPlugins(t, "loopback", "bridge", "firewall", "portmap", "ptp"))
	f.leakMasquerade("a", "dead", "198.18.0.2")
	f.leakMasquerade("b", "dead", "198.18.1.2")
	f.leakMasquerade("b", "live", "198.18.1.3")
	f.nft.Add(nftMasq("c", "dead", "eth1", "198.18.2.2", 1), nftMasq("c", "live", "eth2", "198.18.2.3", 2))
	liveCache := f.writeCache(t, "b", "live", "eth1")
	deadCache := f.writeCache(t, "b", "dead", "eth1")
	report, err := f.c.GC(context.Background(), []string{"live"})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(report.IDs(), ","); got != "dead" {
		t.Fatalf("GC collected %q, want dead only", got)
	}
	if f.hasMasquerade("a", "dead") || f.hasMasquerade("b", "dead") || !f.hasMasquerade("b", "live") {
		t.Fatal("iptables: want the dead workload's masquerade gone from networks a and b, the live one's kept")
	}
	if rules := f.nft.Rules(); len(rules) != 1 || rules[0].Handle != 2 {
		t.Fatalf("nftables rules left %v, want only the live workload's eth2 rule", rules)
	}
	if _, err := os.Stat(liveCache); err != nil {
		t.Fatalf("libcni's GC removed the live workload's eth1 attachment: %v", err)
	}
	if _, err := os.Stat(deadCache); !os.IsNotExist(err) {
		t.Fatalf("the dead workload's cached attachment survived: %v", err)
	}
	if report.Count(GCCachedAttachment) != 1 {
		t.Fatalf("report %+v, want the dead cached attachment", report.Removed())
	}
}

func TestGCKeepsALiveWorkloadsConnectedNetworkWhateverItsInterface(t *testing.T) {
	f := newMultiFixture(t, quickRetry, acceptAllPlugins(t, "loopback", "bridge", "firewall", "portmap", "ptp"))
	live := f.writeCache(t, "c", "live", "eth7") // beyond the three names GC derives from three networks
	dead := f.writeCache(t, "c", "dead", "eth7")
	if _, err := f.c.GC(context.Background(), []string{"live"}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(live); err != nil {
		t.Fatalf("GC removed the live workload's attachment on eth7: %v", err)
	}
	if _, err := os.Stat(dead); !os.IsNotExist(err) {
		t.Fatalf("GC kept the dead workload's attachment on eth7: %v", err)
	}
}

// Every kind of item the force cleanup reports reaches a GCReport under
// the exported GCKind of the same name: gcItem converts kinds as they are.
func TestEveryCleanupKindIsAnExportedGCKind(t *testing.T) {
	for _, tc := range []struct {
		cleanup footprint.Kind
		gc      GCKind
	}{
		{footprint.KindRule, GCRule},
		{footprint.KindChain, GCChain},
		{footprint.KindReservation, GCReservation},
		{footprint.KindCachedResult, GCCachedResult},
		{footprint.KindNFTRule, GCNFTRule},
		{footprint.KindLink, GCLink},
		{footprint.KindTuningFile, GCTuningFile},
		{gc.KindCachedAttachment, GCCachedAttachment},
		{gc.KindRecordedAttachment, GCRecordedAttachment},
	} {
		if got := gcItem(footprint.Item{Kind: tc.cleanup}).Kind; got != tc.gc {
			t.Errorf("cleanup kind %q reaches GC as %q, want %q", tc.cleanup, got, tc.gc)
		}
	}
}

// GCOptions.LiveAttachments keep a container's interfaces by name, as a
// CNI runtime's GC command lists them: the container's attachment under
// another interface is collected.
func TestGCOfLiveAttachmentsByInterface(t *testing.T) {
	type cache struct{ network, id, ifName string }
	for _, tc := range []struct {
		name     string
		caches   []cache
		live     []GCAttachment
		narrowTo []string
		wantKept []cache
		wantGone []cache
	}{
		{"an attachment under a listed interface is kept",
			[]cache{{"b", "c1", "eth1"}}, []GCAttachment{{"c1", "eth1"}}, nil,
			[]cache{{"b", "c1", "eth1"}}, nil},
		{"an attachment under an interface not listed is collected, though its container lists another",
			[]cache{{"b", "c1", "eth1"}}, []GCAttachment{{"c1", "eth0"}}, []string{"b"},
			nil, []cache{{"b", "c1", "eth1"}}},
		{"a narrowed GC collects its network's unlisted interface and leaves the container's other networks",
			[]cache{{"a", "c1", "eth0"}, {"b", "c1", "eth1"}}, []GCAttachment{{"c1", "eth0"}}, []string{"b"},
			[]cache{{"a", "c1", "eth0"}}, []cache{{"b", "c1", "eth1"}}},
		{"an unlisted interface is kept while the same network holds a listed one (its cleanup would reach it)",
			[]cache{{"b", "c1", "eth1"}, {"b", "c1", "net1"}}, []GCAttachment{{"c1", "eth1"}}, []string{"b"},
			[]cache{{"b", "c1", "eth1"}, {"b", "c1", "net1"}}, nil},
		{"another container not listed at all is collected",
			[]cache{{"b", "c1", "eth1"}, {"b", "c2", "eth1"}}, []GCAttachment{{"c1", "eth1"}}, []string{"b"},
			[]cache{{"b", "c1", "eth1"}}, []cache{{"b", "c2", "eth1"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newMultiFixture(t, quickRetry, acceptAllPlugins(t, "loopback", "bridge", "firewall", "portmap", "ptp"))
			paths := map[cache]string{}
			for _, c := range tc.caches {
				paths[c] = f.writeCache(t, c.network, c.id, c.ifName)
			}
			report, err := f.c.GC(context.Background(), []string{}, GCOptions{Networks: tc.narrowTo, LiveAttachments: tc.live})
			if err != nil {
				t.Fatal(err)
			}
			if got := report.Count(GCCachedAttachment); got != len(tc.wantGone) {
				t.Errorf("GC detached %d cached attachments (%+v), want %d", got, report.Removed(), len(tc.wantGone))
			}
			for _, c := range tc.wantKept {
				if _, err := os.Stat(paths[c]); err != nil {
					t.Errorf("GC removed %+v: %v", c, err)
				}
			}
			for _, c := range tc.wantGone {
				if _, err := os.Stat(paths[c]); !os.IsNotExist(err) {
					t.Errorf("GC kept %+v: %v", c, err)
				}
			}
		})
	}
}

func TestGCRefusesALiveAttachmentItCannotName(t *testing.T) {
	f := newMultiFixture(t, quickRetry)
	for _, a := range []GCAttachment{{"../x", "eth0"}, {"c1", ""}, {"c1", "eth/0"}} {
		if _, err := f.c.GC(context.Background(), []string{}, GCOptions{LiveAttachments: []GCAttachment{a}}); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("GC with live attachment %+v: %v, want ErrInvalidArgument", a, err)
		}
	}
}
