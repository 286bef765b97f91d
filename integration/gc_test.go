package integration

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

func TestCheckPassesOnAHealthyAttachmentAndFailsOnABrokenOne(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		nw := newNetwork(t, set, false)
		c := newConfigurator(t, set, nw.conf)
		w := netsandbox.NewWorkload(t)
		alloc := &cninet.Allocation{ID: "chk-1", Ports: []cninet.Port{{Value: 28084, To: 80}}}
		if _, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
			t.Fatal(err)
		}
		err := c.Check(ctxFor(t, time.Minute), alloc, w.Path)
		switch {
		case err == nil:
		case errors.Is(err, cninet.ErrCheckUnsupported) && strings.HasPrefix(set.Name, "debian"):
			t.Logf("CHECK not possible with this plugin set, as expected: %v", err)
		default:
			t.Fatalf("healthy attachment: %v", err)
		}
		if err := w.Delete(); err != nil {
			t.Fatal(err)
		}
		if err := c.Check(ctxFor(t, time.Minute), alloc, w.Path); !errors.Is(err, cninet.ErrCheckFailed) {
			t.Fatalf("namespace gone: %v, want ErrCheckFailed", err)
		}
		if err := c.Teardown(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
			t.Fatal(err)
		}
	})
}

func TestConflistLoadedFromADirectory(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		nw := newNetwork(t, set, false)
		dir := t.TempDir()
		if _, err := cninet.WriteConfList(dir, nw.conf); err != nil {
			t.Fatal(err)
		}
		n := networkSeq.Add(1)
		single := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"single%d","type":"bridge","bridge":"itsb%d","isGateway":true,"ipMasq":true,
			"ipam":{"type":"host-local","ranges":[[{"subnet":"198.18.%d.0/24"}]],"dataDir":"/run/cni"}}`, n, n, n)
		if err := os.WriteFile(filepath.Join(dir, "50-single.conf"), []byte(single), 0o644); err != nil {
			t.Fatal(err)
		}
		for _, tc := range []struct{ network, bridge string }{
			{nw.cfg.NetworkName, nw.cfg.BridgeName},
			{fmt.Sprintf("single%d", n), fmt.Sprintf("itsb%d", n)},
		} {
			t.Run(tc.network, func(t *testing.T) {
				c, err := cninet.New(cninet.Config{ConfDir: dir, NetworkName: tc.network, PluginDirs: []string{set.Dir}})
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				base := baseline(t)
				w := netsandbox.NewWorkload(t)
				alloc := &cninet.Allocation{ID: "dir-1"}
				if _, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
					t.Fatal(err)
				}
				if err := c.Teardown(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
					t.Fatal(err)
				}
				assertNoLeaks(t, base, netsandbox.Allowance{Chains: []string{nw.cfg.AdminChainName}, Links: []string{tc.bridge}})
			})
		}
	})
}

func TestGCRemovesTheDeadAndLeavesTheLiveReachable(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		nw := newNetwork(t, set, true)
		c := newConfigurator(t, set, nw.conf)
		base := baseline(t)
		live := netsandbox.NewWorkload(t)
		liveAlloc := &cninet.Allocation{ID: "live-1", Ports: []cninet.Port{{Value: 28085, To: 8080}}}
		if _, err := c.Setup(ctxFor(t, time.Minute), liveAlloc, live.Path); err != nil {
			t.Fatal(err)
		}
		serveHTTP(t, live, 8080, "live-1")
		// Three ways a runner loses workloads: the namespace deleted, the
		// libcni cache gone too (a reboot), and everything left as it was.
		for i, how := range []string{"namespace deleted", "cache removed", "runner killed"} {
			w := netsandbox.NewWorkload(t)
			id := fmt.Sprintf("dead-%d", i)
			if _, err := c.Setup(ctxFor(t, time.Minute), &cninet.Allocation{ID: id, Ports: []cninet.Port{{Value: 28086 + i, To: 80}}}, w.Path); err != nil {
				t.Fatal(err)
			}
			switch how {
			case "namespace deleted":
				w.Delete()
			case "cache removed":
				w.Delete()
				matches, _ := filepath.Glob(filepath.Join("/var/lib/cni/results", nw.cfg.NetworkName+"-"+id+"-*"))
				for _, m := range matches {
					os.Remove(m)
				}
			}
		}
		report, err := c.GC(ctxFor(t, time.Minute), []string{"live-1"})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(report.IDs(), ","); got != "dead-0,dead-1,dead-2" {
			t.Errorf("GC collected %s", got)
		}
		if body, err := fetch(nw.gw4, 28085); err != nil || body != "hello from live-1" {
			t.Fatalf("live workload after GC (IPv4): %q, %v", body, err)
		}
		if body, err := fetch(nw.gw6, 28085); err != nil || body != "hello from live-1" {
			t.Fatalf("live workload after GC (IPv6): %q, %v", body, err)
		}
		if err := c.Teardown(ctxFor(t, time.Minute), liveAlloc, live.Path); err != nil {
			t.Fatal(err)
		}
		live.Delete()
		// The veths of "runner killed" go with its namespace at test end;
		// everything else must be gone already.
		now, _ := netsandbox.TakeSnapshot()
		for _, leak := range netsandbox.Leaks(base, now, nw.allowance()) {
			if !strings.HasPrefix(leak, "link veth") {
				t.Errorf("left after GC: %s", leak)
			}
		}
	})
}
