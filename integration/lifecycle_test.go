package integration

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

func TestSetupServesThroughTheMappedPortAndTeardownLeavesNothing(t *testing.T) {
	for _, dual := range []bool{false, true} {
		name := "ipv4"
		if dual {
			name = "dual stack"
		}
		t.Run(name, func(t *testing.T) {
			eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
				nw := newNetwork(t, set, dual)
				c := newConfigurator(t, set, nw.conf)
				base := baseline(t)
				w := netsandbox.NewWorkload(t)
				alloc := &cninet.Allocation{ID: "web-1", Ports: []cninet.Port{{Label: "http", Value: 28080, To: 8080}}}
				st, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path)
				if err != nil {
					t.Fatal(err)
				}
				if st.IfName != "eth0" || !st.Address.Is4() || (dual && !st.AddressIPv6.Is6()) || (!dual && st.AddressIPv6.IsValid()) {
					t.Fatalf("status %+v", st)
				}
				serveHTTP(t, w, 8080, "web-1")
				if body, err := fetch(nw.gw4, 28080); err != nil || body != "hello from web-1" {
					t.Fatalf("IPv4 via the mapped port: %q, %v", body, err)
				}
				if dual {
					if body, err := fetch(nw.gw6, 28080); err != nil || body != "hello from web-1" {
						t.Fatalf("IPv6 via the mapped port: %q, %v", body, err)
					}
				}
				if err := c.Teardown(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
					t.Fatal(err)
				}
				w.Delete()
				assertNoLeaks(t, base, nw.allowance())
			})
		})
	}
}

func TestCheckPassesOnAHealthyAttachmentAndFailsOnABrokenOne(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		nw := newNetwork(t, set, false)
		c := newConfigurator(t, set, nw.conf)
		w := netsandbox.NewWorkload(t)
		alloc := &cninet.Allocation{ID: "chk-1", Ports: []cninet.Port{{Value: 28084, To: 80}}}
		if _, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
			t.Fatal(err)
		}
		// nil on every plugin set: where portmap's own CHECK is unsound
		// (Debian's 1.1.1), cninet's check stands in for it.
		if err := c.Check(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
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
			"ipam":{"type":"host-local","ranges":[[{"subnet":"%s.0/24"}]],"dataDir":"/run/cni"}}`, n, n, subnet24(t, n))
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
