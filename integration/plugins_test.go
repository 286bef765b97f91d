package integration

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// The plugins beyond the default bridge conflist that leave state in the
// host: bandwidth (an ifb device), tuning (a backup file) and ptp (the
// bridge's masquerade), end to end against the real plugins.

// pluginNetwork is a network of a conflist written by the test.
type pluginNetwork struct {
	name  string
	conf  []byte
	gw4   netip.Addr
	allow netsandbox.Allowance
}

// newPluginNetwork builds a conflist named like newNetwork's, with its
// own subnet, from the main plugin (bridge or ptp, given without ipam)
// and the chained plugins after it.
func newPluginNetwork(t *testing.T, main map[string]any, chained ...map[string]any) pluginNetwork {
	t.Helper()
	n := networkSeq.Add(1)
	nw := pluginNetwork{name: fmt.Sprintf("it%d", n), gw4: netip.MustParseAddr(subnet24(t, n) + ".1")}
	main["ipam"] = map[string]any{
		"type":    "host-local",
		"ranges":  [][]map[string]any{{{"subnet": subnet24(t, n) + ".0/24"}}},
		"routes":  []map[string]any{{"dst": "0.0.0.0/0"}},
		"dataDir": "/run/cni",
	}
	if main["type"] == "bridge" {
		main["bridge"] = fmt.Sprintf("itbr%d", n)
		nw.allow.Links = []string{main["bridge"].(string)}
	}
	conf, err := json.Marshal(map[string]any{
		"cniVersion": "1.0.0",
		"name":       nw.name,
		"plugins":    append([]map[string]any{main}, chained...),
	})
	if err != nil {
		t.Fatal(err)
	}
	nw.conf = conf
	return nw
}

// howGone are the two ways a workload's attachment goes once its
// namespace was deleted: its runner tears it down, or the runner is gone
// too and a GC with nothing live collects it.
var howGone = []struct {
	name   string
	remove func(t *testing.T, c *cninet.Configurator, alloc *cninet.Allocation, netns string) error
}{
	{"namespace deleted, then Teardown", func(t *testing.T, c *cninet.Configurator, alloc *cninet.Allocation, netns string) error {
		return c.Teardown(ctxFor(t, time.Minute), alloc, netns)
	}},
	{"namespace deleted, runner gone, then GC", func(t *testing.T, c *cninet.Configurator, _ *cninet.Allocation, _ string) error {
		_, err := c.GC(ctxFor(t, time.Minute), []string{})
		return err
	}},
	{"namespace and cache gone, then GC", func(t *testing.T, c *cninet.Configurator, alloc *cninet.Allocation, _ string) error {
		paths, _ := filepath.Glob(filepath.Join(libcniResults, "*-"+alloc.ID+"-eth0"))
		if len(paths) != 1 {
			return fmt.Errorf("cached results of %s: %v, want one", alloc.ID, paths)
		}
		if err := os.Remove(paths[0]); err != nil {
			return err
		}
		_, err := c.GC(ctxFor(t, time.Minute), []string{})
		return err
	}},
}

func TestBandwidthIfbDeviceIsGoneAfterTheWorkload(t *testing.T) {
	for _, gone := range howGone {
		t.Run(gone.name, func(t *testing.T) {
			eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
				nw := newPluginNetwork(t,
					map[string]any{"type": "bridge", "isGateway": true, "ipMasq": true},
					map[string]any{"type": "bandwidth", "ingressRate": 8_000_000, "ingressBurst": 80_000,
						"egressRate": 8_000_000, "egressBurst": 80_000})
				c := newConfigurator(t, set, nw.conf)
				base := baseline(t)
				w := netsandbox.NewWorkload(t)
				alloc := &cninet.Allocation{ID: "bw-" + nw.name}
				if _, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
					t.Fatal(err)
				}
				ifb := footprint.Attachment{Network: nw.name, ID: alloc.ID}.BandwidthDevice()
				if !snapshot(t).Links[ifb] {
					t.Fatalf("no ifb device %s in the audit after Setup: the audit would not see it leak", ifb)
				}
				w.Delete()
				if err := gone.remove(t, c, alloc, w.Path); err != nil {
					t.Fatal(err)
				}
				assertNoLeaksOnceNamespacesAreGone(t, base, nw.allow)
			})
		})
	}
}

func TestTuningBackupFileIsGoneAfterTheWorkload(t *testing.T) {
	for _, gone := range howGone {
		t.Run(gone.name, func(t *testing.T) {
			eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
				nw := newPluginNetwork(t,
					map[string]any{"type": "bridge", "isGateway": true, "ipMasq": true},
					map[string]any{"type": "tuning", "mtu": 1400})
				c := newConfigurator(t, set, nw.conf)
				base := baseline(t)
				w := netsandbox.NewWorkload(t)
				alloc := &cninet.Allocation{ID: "tun-" + nw.name} // the backup file names no network
				if _, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
					t.Fatal(err)
				}
				backup := footprint.Attachment{Network: nw.name, ID: alloc.ID}.TuningFile(footprint.DefaultTuningDir, "eth0")
				if !snapshot(t).Files[backup] {
					t.Fatalf("no tuning backup %s in the audit after Setup", backup)
				}
				w.Delete()
				if err := gone.remove(t, c, alloc, w.Path); err != nil {
					t.Fatal(err)
				}
				assertNoLeaksOnceNamespacesAreGone(t, base, nw.allow)
			})
		})
	}
}

func TestPTPWithMasqueradeAndPortsLeavesNothing(t *testing.T) {
	for _, gone := range howGone {
		t.Run(gone.name, func(t *testing.T) {
			eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
				ptp := map[string]any{"type": "ptp", "ipMasq": true}
				portmap := map[string]any{"type": "portmap", "capabilities": map[string]bool{"portMappings": true}, "snat": true}
				if set.Backend == cninet.BackendNFTables {
					ptp["ipMasqBackend"] = "nftables"
					portmap["backend"] = "nftables"
				}
				nw := newPluginNetwork(t, ptp, portmap)
				c := newConfigurator(t, set, nw.conf)
				base := baseline(t)
				w := netsandbox.NewWorkload(t)
				port := hostPort(nw.name, 0)
				alloc := &cninet.Allocation{ID: "ptp-" + nw.name, Ports: []cninet.Port{{Value: port, To: 8080}}}
				if _, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
					t.Fatal(err)
				}
				stop := serveHTTP(t, w, 8080, alloc.ID)
				assertReachable(t, "after Setup", port, alloc.ID, nw.gw4)
				leaks := strings.Join(netsandbox.Leaks(base, snapshot(t), nw.allow), "\n")
				if !strings.Contains(leaks, alloc.ID) {
					t.Fatalf("the audit sees none of ptp's masquerade or portmap's rules of %s:\n%s", alloc.ID, leaks)
				}
				stop()
				w.Delete()
				if err := gone.remove(t, c, alloc, w.Path); err != nil {
					t.Fatal(err)
				}
				assertNoLeaksOnceNamespacesAreGone(t, base, nw.allow)
			})
		})
	}
}

// assertNoLeaksOnceNamespacesAreGone is assertNoLeaks after a deleted
// namespace is really gone (see settled).
func assertNoLeaksOnceNamespacesAreGone(t *testing.T, base netsandbox.Snapshot, allow netsandbox.Allowance) {
	t.Helper()
	settled(func() []string { return netsandbox.Leaks(base, snapshot(t), allow) })
	assertNoLeaks(t, base, allow)
}
