package integration

import (
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

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

// loopbackUpCount counts 1 while the workload's lo is up, for a sampler.
func loopbackUpCount(w *netsandbox.Workload) func() (int, error) {
	return func() (int, error) {
		up := 0
		err := w.NS.Do(func(ns.NetNS) error {
			lo, err := net.InterfaceByName("lo")
			if err == nil && lo.Flags&net.FlagUp != 0 {
				up = 1
			}
			return err
		})
		return up, err
	}
}

// loopbackDEL runs set's loopback plugin's DEL in netns through libcni,
// as a chain's DEL would run it without cninet.
func loopbackDEL(t *testing.T, set netsandbox.PluginSet, netns string) error {
	t.Helper()
	list, err := libcni.ConfListFromBytes([]byte(`{"cniVersion":"1.0.0","name":"lo-control","plugins":[{"type":"loopback"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	return libcni.NewCNIConfigWithCacheDir([]string{set.Dir}, t.TempDir(), nil).DelNetworkList(ctxFor(t, time.Minute), list,
		&libcni.RuntimeConf{ContainerID: "lo-control", NetNS: netns, IfName: "lo"})
}

func TestAConnectedNetworkIsDetachedByTeardownWithTheOriginalAllocationAfterTheNamespaceWentAway(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		n1, n2 := twoNetworks(t, set)
		ports := ownPorts(t, 28186, 8080, &n1, &n2) // n1's port would answer on n2's gateway too
		c := newMultiConfigurator(t, set, n1.conf, [][]byte{n2.conf}, cninet.RetryPolicy{})
		base := baseline(t)
		w := netsandbox.NewWorkload(t)
		alloc := &cninet.Allocation{ID: "connect-gone", Ports: []cninet.Port{{Value: ports[0], To: 8080}}} // the default network only
		if _, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
			t.Fatal(err)
		}
		st, err := c.Connect(ctxFor(t, time.Minute), alloc, n2.cfg.NetworkName, w.Path)
		if err != nil {
			t.Fatal(err)
		}
		if st.IfName != "eth1" || st.Interfaces[0].Network != n2.cfg.NetworkName {
			t.Fatalf("connect status %+v, want %s on eth1", st, n2.cfg.NetworkName)
		}
		stop := serveHTTP(t, w, 8080, "connect-gone")
		if body, err := fetch(n2.gw4, ports[1]); err != nil || body != "hello from connect-gone" {
			t.Fatalf("through the connected network's own mapped port %d: %q, %v", ports[1], body, err)
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
		ports := ownPorts(t, 28187, 8080, &n1, &n2)
		c := newMultiConfigurator(t, set, n1.conf, [][]byte{n2.conf}, cninet.RetryPolicy{})
		base := baseline(t)
		w := netsandbox.NewWorkload(t)
		alloc := &cninet.Allocation{ID: "disconnect-1", Ports: []cninet.Port{{Value: ports[0], To: 8080}},
			NetworkNames: []string{n1.cfg.NetworkName, n2.cfg.NetworkName}}
		st, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path)
		if err != nil {
			t.Fatal(err)
		}
		serveHTTP(t, w, 8080, "disconnect-1")
		assertServed(t, st, []network{n1, n2}, ports, 8080, "hello from disconnect-1")
		// The loopback plugin's DEL would set lo down: the workload's
		// localhost traffic must not stop, not even for an instant.
		sampleWhile(t, "the workload's lo up while a network is disconnected", 1, loopbackUpCount(w), func() {
			for i := range 2 { // the second time: not attached any more, nil
				if err := c.Disconnect(ctxFor(t, time.Minute), alloc, n2.cfg.NetworkName, w.Path); err != nil {
					t.Errorf("disconnect %d: %v", i+1, err)
				}
			}
		})
		if !loopbackUp(t, w) {
			t.Fatal("the workload's lo is down after the disconnect: the loopback plugin's DEL took it down and nothing brought it back")
		}
		if body, err := fetchOnce(n2.gw4, ports[1]); err == nil {
			t.Fatalf("%s's own port %d still answers on its gateway after the disconnect: %q", n2.cfg.NetworkName, ports[1], body)
		}
		if body, err := fetch(n1.gw4, ports[0]); err != nil || body != "hello from disconnect-1" {
			t.Fatalf("through %s's mapped port after disconnecting %s: %q, %v", n1.cfg.NetworkName, n2.cfg.NetworkName, body, err)
		}
		if body, err := fetch(st.Interfaces[0].Address, 8080); err != nil || body != "hello from disconnect-1" {
			t.Fatalf("at its %s address after the disconnect: %q, %v", n1.cfg.NetworkName, body, err)
		}
		// The lo sampler's positive control: the loopback plugin's own
		// DEL, run without cninet, takes lo down, and the sampler sees it.
		sampleDropWhile(t, "the workload's lo during the loopback plugin's own DEL", 1, loopbackUpCount(w), func() {
			if err := loopbackDEL(t, set, w.Path); err != nil {
				t.Errorf("the loopback plugin's DEL: %v", err)
			}
		})
		if err := c.Teardown(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
			t.Fatal(err)
		}
		w.Delete()
		assertNoLeaks(t, base, allowBoth(n1, n2))
	})
}

// fetchOnce is one try of fetch, on a connection of its own: for a port
// that must no longer answer.
func fetchOnce(addr netip.Addr, port int) (string, error) {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := client.Get("http://" + netip.AddrPortFrom(addr, uint16(port)).String() + "/")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}
