package integration

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// twoNetworks are two test networks, each with its own bridge and subnet.
// The second one sets no default route: the workload already has one
// through the first, and the Debian plugins fail an ADD whose route
// exists (upstream's add it as an ECMP path).
func twoNetworks(t *testing.T, set netsandbox.PluginSet) (first, second network) {
	t.Helper()
	first, second = newNetwork(t, set, false), newNetwork(t, set, false)
	var list map[string]any
	if err := json.Unmarshal(second.conf, &list); err != nil {
		t.Fatal(err)
	}
	for _, p := range list["plugins"].([]any) {
		if ipam, ok := p.(map[string]any)["ipam"].(map[string]any); ok {
			delete(ipam, "routes")
		}
	}
	conf, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	second.conf = conf
	return first, second
}

func allowBoth(a, b network) netsandbox.Allowance {
	allow := a.allowance()
	allow.Chains = append(allow.Chains, b.allowance().Chains...)
	allow.Links = append(allow.Links, b.allowance().Links...)
	return allow
}

// newMultiConfigurator knows both networks; the first is the default.
func newMultiConfigurator(t *testing.T, set netsandbox.PluginSet, first []byte, more [][]byte, retry cninet.RetryPolicy, extraDirs ...string) *cninet.Configurator {
	t.Helper()
	c, err := cninet.New(cninet.Config{
		Logger:     hclog.New(&hclog.LoggerOptions{Name: "cninet", Level: hclog.Warn, Output: testWriter{t}}),
		ConfList:   first,
		ConfLists:  more,
		PluginDirs: append([]string{set.Dir}, extraDirs...),
		Retry:      retry,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// ownPort makes a network's portmap map a host port of its own, to →
// port in the workload, whatever the allocation's ports: a static mapping
// in the plugin's runtimeConfig, with the portMappings capability dropped
// (libcni then hands the plugin its conf's runtimeConfig unchanged).
// cninet maps an allocation's ports on every network that declares the
// capability, so with one port for all, one network's surviving DNAT
// rule answers on every gateway (portmap's rules match any local
// address): a test of several networks gives each but the first (which
// maps the allocation's ports) a port of its own, and asks each network's
// port on that network's gateway, so that a lost mapping on any network
// fails it.
func ownPort(t *testing.T, conf []byte, hostPort, port int) []byte {
	t.Helper()
	var list map[string]any
	if err := json.Unmarshal(conf, &list); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, p := range list["plugins"].([]any) {
		if plugin := p.(map[string]any); plugin["type"] == "portmap" {
			found = true
			delete(plugin, "capabilities")
			plugin["runtimeConfig"] = map[string]any{"portMappings": []map[string]any{
				{"hostPort": hostPort, "containerPort": port, "protocol": "tcp"}}}
		}
	}
	if !found {
		t.Fatal("the conflist has no portmap")
	}
	out, err := json.Marshal(list)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// ownPorts gives every network of nets but the first its own host port
// (hostPort(name, 0), mapped to port; see ownPort), and returns each
// network's host port: the first's is the allocation's, first.
func ownPorts(t *testing.T, first int, port int, nets ...*network) []int {
	t.Helper()
	ports := []int{first}
	for _, nw := range nets[1:] {
		p := hostPort(nw.cfg.NetworkName, 0)
		nw.conf = ownPort(t, nw.conf, p, port)
		ports = append(ports, p)
	}
	return ports
}

// assertServed fetches the workload through each network: network i's own
// host port hostPorts[i] on its gateway, and the workload's own address
// on that network.
func assertServed(t *testing.T, st *cninet.NetworkStatus, nets []network, hostPorts []int, port int, want string) {
	t.Helper()
	if len(st.Interfaces) != len(nets) || len(hostPorts) != len(nets) {
		t.Fatalf("status has %d networks, %d host ports given, want %d: %+v", len(st.Interfaces), len(hostPorts), len(nets), st.Interfaces)
	}
	for i, nw := range nets {
		att := st.Interfaces[i]
		if att.Network != nw.cfg.NetworkName || att.IfName != fmt.Sprintf("eth%d", i) {
			t.Fatalf("network %d: %+v, want %s on eth%d", i, att, nw.cfg.NetworkName, i)
		}
		if body, err := fetch(nw.gw4, hostPorts[i]); err != nil || body != want {
			t.Fatalf("through %s's gateway %s:%d, its own port: %q, %v", att.Network, nw.gw4, hostPorts[i], body, err)
		}
		if body, err := fetch(att.Address, port); err != nil || body != want {
			t.Fatalf("at its %s address %s:%d: %q, %v", att.Network, att.Address, port, body, err)
		}
	}
}

func TestAWorkloadInTwoNetworksIsServedThroughBothAndTeardownLeavesNothing(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		n1, n2 := twoNetworks(t, set)
		ports := ownPorts(t, 28180, 8080, &n1, &n2)
		c := newMultiConfigurator(t, set, n1.conf, [][]byte{n2.conf}, cninet.RetryPolicy{})
		base := baseline(t)
		w := netsandbox.NewWorkload(t)
		alloc := &cninet.Allocation{ID: "multi-1", Ports: []cninet.Port{{Value: ports[0], To: 8080}},
			NetworkNames: []string{n1.cfg.NetworkName, n2.cfg.NetworkName}}
		st, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path)
		if err != nil {
			t.Fatal(err)
		}
		if st.IfName != "eth0" || st.Address != st.Interfaces[0].Address {
			t.Fatalf("top-level status %+v is not the first network's", st)
		}
		serveHTTP(t, w, 8080, "multi-1")
		assertServed(t, st, []network{n1, n2}, ports, 8080, "hello from multi-1")
		if err := c.Check(ctxFor(t, time.Minute), alloc, w.Path); err != nil && !(errors.Is(err, cninet.ErrCheckUnsupported) && strings.HasPrefix(set.Name, "debian")) {
			t.Fatalf("Check of a healthy two-network attachment: %v", err)
		}
		if err := c.Teardown(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
			t.Fatal(err)
		}
		w.Delete()
		assertNoLeaks(t, base, allowBoth(n1, n2))
	})
}

func TestAPluginFailingOnTheSecondNetworkRollsBackTheFirst(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		n1, n2 := twoNetworks(t, set)
		failing := withPlugin(t, n2.conf, map[string]any{"type": "failonce", "stateDir": t.TempDir()})
		c := newMultiConfigurator(t, set, n1.conf, [][]byte{failing}, cninet.RetryPolicy{Attempts: 1}, netsandbox.BuildPlugin(t, "failonce"))
		base := baseline(t)
		w := netsandbox.NewWorkload(t)
		alloc := &cninet.Allocation{ID: "rollback-1", Ports: []cninet.Port{{Value: 28181, To: 8080}},
			NetworkNames: []string{n1.cfg.NetworkName, n2.cfg.NetworkName}}
		_, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path)
		if !errors.Is(err, cninet.ErrSetupFailed) || !strings.Contains(err.Error(), fmt.Sprintf("network %q", n2.cfg.NetworkName)) {
			t.Fatalf("err = %v, want ErrSetupFailed naming %s", err, n2.cfg.NetworkName)
		}
		assertNoLeaks(t, base, allowBoth(n1, n2)) // the workload's namespace still exists: nothing may be left even so
	})
}

func TestTwoNetworksLeaveNothingWhenTheNamespaceIsDeletedFirst(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		n1, n2 := twoNetworks(t, set)
		c := newMultiConfigurator(t, set, n1.conf, [][]byte{n2.conf}, cninet.RetryPolicy{})
		base := baseline(t)
		w := netsandbox.NewWorkload(t)
		alloc := &cninet.Allocation{ID: "gone-multi", Ports: []cninet.Port{{Value: 28182, To: 80}},
			NetworkNames: []string{n2.cfg.NetworkName, n1.cfg.NetworkName}} // the default network second, on eth1
		if _, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
			t.Fatal(err)
		}
		if err := w.Delete(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 2; i++ {
			if err := c.Teardown(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
				t.Fatalf("teardown %d: %v", i+1, err)
			}
		}
		assertNoLeaks(t, base, allowBoth(n1, n2))
	})
}

func TestWorkloadsWithDifferentNetworkSetsShareAConfiguratorConcurrently(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		n1, n2 := twoNetworks(t, set)
		c := newMultiConfigurator(t, set, n1.conf, [][]byte{n2.conf}, cninet.RetryPolicy{})
		base := baseline(t)
		sets := [][]network{{n1, n2}, {n2}, {n1}, {n2, n1}}
		var wg sync.WaitGroup
		for i, nets := range sets {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := setupServeTeardown(t, c, i, nets); err != nil {
					t.Error(err)
				}
			}()
		}
		wg.Wait()
		assertNoLeaks(t, base, allowBoth(n1, n2))
	})
}

// setupServeTeardown runs workload i in nets, fetches it through each, and
// tears it down. It reports instead of failing: it runs in a goroutine.
func setupServeTeardown(t *testing.T, c *cninet.Configurator, i int, nets []network) (err error) {
	w := netsandbox.NewWorkload(t)
	defer w.Delete()
	alloc := &cninet.Allocation{ID: fmt.Sprintf("conc-%d", i), Ports: []cninet.Port{{Value: 28190 + i, To: 8080}}}
	for _, nw := range nets {
		alloc.NetworkNames = append(alloc.NetworkNames, nw.cfg.NetworkName)
	}
	st, err := c.Setup(ctxFor(t, 2*time.Minute), alloc, w.Path)
	if err != nil {
		return fmt.Errorf("setup %s: %w", alloc.ID, err)
	}
	defer func() {
		if terr := c.Teardown(ctxFor(t, 2*time.Minute), alloc, w.Path); terr != nil && err == nil {
			err = fmt.Errorf("teardown %s: %w", alloc.ID, terr)
		}
	}()
	serveHTTP(t, w, 8080, alloc.ID)
	for j, att := range st.Interfaces {
		if att.Network != nets[j].cfg.NetworkName || att.IfName != fmt.Sprintf("eth%d", j) {
			return fmt.Errorf("%s: network %d is %+v", alloc.ID, j, att)
		}
		if body, ferr := fetch(att.Address, 8080); ferr != nil || body != "hello from "+alloc.ID {
			return fmt.Errorf("%s at %s: %q, %v", alloc.ID, att.Address, body, ferr)
		}
	}
	return nil
}

func TestGCOfADeadWorkloadInTwoNetworksKeepsTheLiveOne(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		n1, n2 := twoNetworks(t, set)
		ports := ownPorts(t, 28183, 8080, &n1, &n2) // the dead one maps n2's port too, to its own address: GC must take that rule, not the live one's
		c := newMultiConfigurator(t, set, n1.conf, [][]byte{n2.conf}, cninet.RetryPolicy{})
		base := baseline(t)
		live := netsandbox.NewWorkload(t)
		liveAlloc := &cninet.Allocation{ID: "live-multi", Ports: []cninet.Port{{Value: ports[0], To: 8080}},
			NetworkNames: []string{n1.cfg.NetworkName, n2.cfg.NetworkName}}
		st, err := c.Setup(ctxFor(t, time.Minute), liveAlloc, live.Path)
		if err != nil {
			t.Fatal(err)
		}
		serveHTTP(t, live, 8080, "live-multi")
		dead := netsandbox.NewWorkload(t)
		// n2 on eth0 here, on eth1 for the live one: GC must tell them apart by id.
		deadAlloc := &cninet.Allocation{ID: "dead-multi", Ports: []cninet.Port{{Value: 28184, To: 80}},
			NetworkNames: []string{n2.cfg.NetworkName, n1.cfg.NetworkName}}
		if _, err := c.Setup(ctxFor(t, time.Minute), deadAlloc, dead.Path); err != nil {
			t.Fatal(err)
		}
		dead.Delete() // the runner never tears it down; libcni's cache still remembers it
		report, err := c.GC(ctxFor(t, time.Minute), []string{"live-multi"})
		if err != nil {
			t.Fatal(err)
		}
		if got := strings.Join(report.IDs(), ","); got != "dead-multi" {
			t.Fatalf("GC collected %q", got)
		}
		assertServed(t, st, []network{n1, n2}, ports, 8080, "hello from live-multi")
		if err := c.Teardown(ctxFor(t, time.Minute), liveAlloc, live.Path); err != nil {
			t.Fatal(err)
		}
		live.Delete()
		assertNoLeaks(t, base, allowBoth(n1, n2))
	})
}

// threeNetworks are twoNetworks and one more like the second (no default
// route of its own).
func threeNetworks(t *testing.T, set netsandbox.PluginSet) (network, network, network) {
	t.Helper()
	n1, n2 := twoNetworks(t, set)
	_, n3 := twoNetworks(t, set)
	return n1, n2, n3
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

func TestARetryOnOneNetworkKeepsTheOtherNetworksMappedPorts(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		n1, n2, n3 := threeNetworks(t, set)
		ports := ownPorts(t, 28188, 8080, &n1, &n2, &n3) // a DEL that took another network's rules leaves its port unanswered
		failing := withPlugin(t, n2.conf, map[string]any{"type": "failonce", "stateDir": t.TempDir()})
		c := newMultiConfigurator(t, set, n1.conf, [][]byte{failing, n3.conf}, cninet.RetryPolicy{}, netsandbox.BuildPlugin(t, "failonce"))
		base := baseline(t)
		w := netsandbox.NewWorkload(t)
		alloc := &cninet.Allocation{ID: "retry-keeps", Ports: []cninet.Port{{Value: ports[0], To: 8080}},
			NetworkNames: []string{n1.cfg.NetworkName, n2.cfg.NetworkName, n3.cfg.NetworkName}}
		st, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path)
		if err != nil {
			t.Fatal(err)
		}
		serveHTTP(t, w, 8080, "retry-keeps")
		// n2's retry ran a DEL of the same container id while n1 and n3 were attaching or attached.
		assertServed(t, st, []network{n1, n2, n3}, ports, 8080, "hello from retry-keeps")
		if err := c.Teardown(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
			t.Fatal(err)
		}
		w.Delete()
		assertNoLeaks(t, base, allowAll(n1, n2, n3))
	})
}
