package integration

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// threeNetworks are twoNetworks and one more like the second (no default
// route of its own).
func threeNetworks(t *testing.T, set netsandbox.PluginSet) (network, network, network) {
	t.Helper()
	n1, n2 := twoNetworks(t, set)
	_, n3 := twoNetworks(t, set)
	return n1, n2, n3
}

// loopbackUp reports whether the workload's lo is up.
func loopbackUp(t *testing.T, w *netsandbox.Workload) bool {
	t.Helper()
	up := false
	err := w.NS.Do(func(ns.NetNS) error {
		lo, err := net.InterfaceByName("lo")
		if err == nil {
			up = lo.Flags&net.FlagUp != 0
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return up
}

func allowAll(nets ...network) netsandbox.Allowance {
	var allow netsandbox.Allowance
	for _, n := range nets {
		allow.Chains = append(allow.Chains, n.allowance().Chains...)
		allow.Links = append(allow.Links, n.allowance().Links...)
	}
	return allow
}

// warmUp attaches and detaches a workload on each of nets, one after
// another, so that the plugins' shared chains (CNI-HOSTPORT-*,
// CNI-FORWARD, …) exist: two plugins creating one at the same moment race
// (the reason Setup retries), which a test without retries must not meet.
func warmUp(t *testing.T, c *cninet.Configurator, nets ...network) {
	t.Helper()
	w := netsandbox.NewWorkload(t)
	defer w.Delete()
	for _, n := range nets {
		alloc := &cninet.Allocation{ID: "warm-up", Ports: []cninet.Port{{Value: 28199, To: 8080}}, NetworkNames: []string{n.cfg.NetworkName}}
		if _, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
			t.Fatal(err)
		}
		if err := c.Teardown(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
			t.Fatal(err)
		}
	}
}

func TestConcurrentAttachWithTheMiddleNetworkFailingLeavesNothingOnAnyNetwork(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		n1, n2, n3 := threeNetworks(t, set)
		failing := withPlugin(t, n2.conf, map[string]any{"type": "failonce", "stateDir": t.TempDir()})
		c := newMultiConfigurator(t, set, n1.conf, [][]byte{failing, n3.conf}, cninet.RetryPolicy{Attempts: 1}, netsandbox.BuildPlugin(t, "failonce"))
		warmUp(t, c, n1, n3) // the plugins' shared chains exist: without retries, their creation race is not what fails
		base := baseline(t)
		w := netsandbox.NewWorkload(t)
		alloc := &cninet.Allocation{ID: "conc-fail", Ports: []cninet.Port{{Value: 28185, To: 8080}},
			NetworkNames: []string{n1.cfg.NetworkName, n2.cfg.NetworkName, n3.cfg.NetworkName}}
		_, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path)
		if !errors.Is(err, cninet.ErrSetupFailed) || !strings.Contains(err.Error(), fmt.Sprintf("network %q", n2.cfg.NetworkName)) {
			t.Fatalf("err = %v, want ErrSetupFailed naming %s", err, n2.cfg.NetworkName)
		}
		for _, other := range []network{n1, n3} {
			if strings.Contains(err.Error(), fmt.Sprintf("network %q", other.cfg.NetworkName)) {
				t.Errorf("err = %v names %s, which did not fail", err, other.cfg.NetworkName)
			}
		}
		assertNoLeaks(t, base, allowAll(n1, n2, n3)) // the namespace still exists: nothing may be left even so
	})
}

func TestAConnectedNetworkIsDetachedByTeardownWithTheOriginalAllocationAfterTheNamespaceWentAway(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		n1, n2 := twoNetworks(t, set)
		c := newMultiConfigurator(t, set, n1.conf, [][]byte{n2.conf}, cninet.RetryPolicy{})
		base := baseline(t)
		w := netsandbox.NewWorkload(t)
		alloc := &cninet.Allocation{ID: "connect-gone", Ports: []cninet.Port{{Value: 28186, To: 8080}}} // the default network only
		if _, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
			t.Fatal(err)
		}
		st, err := c.Connect(ctxFor(t, time.Minute), alloc, n2.cfg.NetworkName, w.Path)
		if err != nil {
			t.Fatal(err)
		}
		if st.InterfaceName != "eth1" || st.Networks[0].Network != n2.cfg.NetworkName {
			t.Fatalf("connect status %+v, want %s on eth1", st, n2.cfg.NetworkName)
		}
		stop := serveHTTP(t, w, 8080, "connect-gone")
		if body, err := fetch(n2.gw4, 28186); err != nil || body != "hello from connect-gone" {
			t.Fatalf("through the connected network's mapped port: %q, %v", body, err)
		}
		stop()
		if err := w.Delete(); err != nil {
			t.Fatal(err)
		}
		if err := c.Teardown(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
			t.Fatal(err)
		}
		assertNoLeaks(t, base, allowBoth(n1, n2))
	})
}

func TestDisconnectKeepsTheOtherNetworkReachableThroughItsMappedPort(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		n1, n2 := twoNetworks(t, set)
		c := newMultiConfigurator(t, set, n1.conf, [][]byte{n2.conf}, cninet.RetryPolicy{})
		base := baseline(t)
		w := netsandbox.NewWorkload(t)
		alloc := &cninet.Allocation{ID: "disconnect-1", Ports: []cninet.Port{{Value: 28187, To: 8080}},
			NetworkNames: []string{n1.cfg.NetworkName, n2.cfg.NetworkName}}
		st, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path)
		if err != nil {
			t.Fatal(err)
		}
		serveHTTP(t, w, 8080, "disconnect-1")
		assertServed(t, st, []network{n1, n2}, 28187, 8080, "hello from disconnect-1")
		for i := range 2 { // the second time: not attached any more, nil
			if err := c.Disconnect(ctxFor(t, time.Minute), alloc, n2.cfg.NetworkName, w.Path); err != nil {
				t.Fatalf("disconnect %d: %v", i+1, err)
			}
		}
		if !loopbackUp(t, w) {
			t.Fatal("the workload's lo is down after the disconnect: the loopback plugin's DEL took it down and nothing brought it back")
		}
		if body, err := fetch(n1.gw4, 28187); err != nil || body != "hello from disconnect-1" {
			t.Fatalf("through %s's mapped port after disconnecting %s: %q, %v", n1.cfg.NetworkName, n2.cfg.NetworkName, body, err)
		}
		if body, err := fetch(st.Networks[0].Address, 8080); err != nil || body != "hello from disconnect-1" {
			t.Fatalf("at its %s address after the disconnect: %q, %v", n1.cfg.NetworkName, body, err)
		}
		if err := c.Teardown(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
			t.Fatal(err)
		}
		w.Delete()
		assertNoLeaks(t, base, allowBoth(n1, n2))
	})
}

func TestARetryOnOneNetworkKeepsTheOtherNetworksMappedPorts(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		n1, n2, n3 := threeNetworks(t, set)
		failing := withPlugin(t, n2.conf, map[string]any{"type": "failonce", "stateDir": t.TempDir()})
		c := newMultiConfigurator(t, set, n1.conf, [][]byte{failing, n3.conf}, cninet.RetryPolicy{}, netsandbox.BuildPlugin(t, "failonce"))
		base := baseline(t)
		w := netsandbox.NewWorkload(t)
		alloc := &cninet.Allocation{ID: "retry-keeps", Ports: []cninet.Port{{Value: 28188, To: 8080}},
			NetworkNames: []string{n1.cfg.NetworkName, n2.cfg.NetworkName, n3.cfg.NetworkName}}
		st, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path)
		if err != nil {
			t.Fatal(err)
		}
		serveHTTP(t, w, 8080, "retry-keeps")
		// n2's retry ran a DEL of the same container id while n1 and n3 were attaching or attached.
		assertServed(t, st, []network{n1, n2, n3}, 28188, 8080, "hello from retry-keeps")
		if err := c.Teardown(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
			t.Fatal(err)
		}
		w.Delete()
		assertNoLeaks(t, base, allowAll(n1, n2, n3))
	})
}
