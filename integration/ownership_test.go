package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// portmap's nftables rules carry the bare container id as their comment,
// whatever the network: tearing down (and collecting) one network's
// attachment must not touch the same id's attachment on another.
func TestSameIDOnTwoNetworksStaysReachableWhenOneIsTornDownAndCollected(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		nwA, nwB := newNetwork(t, set, true), newNetwork(t, set, true)
		cA, cB := newConfigurator(t, set, nwA.conf), newConfigurator(t, set, nwB.conf)
		base := baseline(t)
		wA, wB := netsandbox.NewWorkload(t), netsandbox.NewWorkload(t)
		allocA := &cninet.Allocation{ID: "same-1", Ports: []cninet.Port{{Value: 28100, To: 8080}}}
		allocB := &cninet.Allocation{ID: "same-1", Ports: []cninet.Port{{Value: 28101, To: 8080}}}
		if _, err := cA.Setup(ctxFor(t, time.Minute), allocA, wA.Path); err != nil {
			t.Fatal(err)
		}
		if _, err := cB.Setup(ctxFor(t, time.Minute), allocB, wB.Path); err != nil {
			t.Fatal(err)
		}
		serveHTTP(t, wB, 8080, "same-1 on B")
		wA.Delete() // the leak-prone way: A's namespace goes first
		if err := cA.Teardown(ctxFor(t, time.Minute), allocA, wA.Path); err != nil {
			t.Fatal(err)
		}
		if _, err := cA.GC(ctxFor(t, time.Minute), []string{}); err != nil {
			t.Fatal(err)
		}
		for _, gw := range []string{nwB.gw4.String(), nwB.gw6.String()} {
			if body, err := fetch(netipMust(gw), 28101); err != nil || body != "hello from same-1 on B" {
				t.Fatalf("same-1 on network B via %s after A's teardown and GC: %q, %v", gw, body, err)
			}
		}
		if err := cB.Teardown(ctxFor(t, time.Minute), allocB, wB.Path); err != nil {
			t.Fatal(err)
		}
		wB.Delete()
		assertNoLeaks(t, base, netsandbox.Allowance{Chains: []string{nwA.cfg.AdminChainName}, Links: []string{nwA.cfg.BridgeName, nwB.cfg.BridgeName}})
	})
}

// Ids that prefix each other ("ab", "abc") and ids long enough that the
// plugins' comments are cut (iptables keeps 255 bytes of a comment; the
// nftables masquerade comment is cut at 128) each own exactly their rules.
func TestPrefixAndCutIDsOwnExactlyTheirRules(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		long := strings.Repeat("a", 240) + "1" // iptables: cut comments
		if set.Backend == cninet.BackendNFTables {
			long = strings.Repeat("a", 110) + "1" // nft: portmap refuses comments over 128
		}
		nw := newNetwork(t, set, true)
		c := newConfigurator(t, set, nw.conf)
		base := baseline(t)
		ids := []string{"ab", "abc", long, long[:len(long)-1] + "2"}
		workloads := map[string]*netsandbox.Workload{}
		stops := map[string]func(){}
		for i, id := range ids {
			w := netsandbox.NewWorkload(t)
			workloads[id] = w
			if _, err := c.Setup(ctxFor(t, time.Minute), &cninet.Allocation{ID: id, Ports: []cninet.Port{{Value: 28110 + i, To: 8080}}}, w.Path); err != nil {
				t.Fatalf("setup %.12s…: %v", id, err)
			}
			stops[id] = serveHTTP(t, w, 8080, fmt.Sprint(i))
		}
		for i, id := range ids {
			if body, err := fetch(nw.gw4, 28110+i); err != nil || body != fmt.Sprintf("hello from %d", i) {
				t.Fatalf("%.12s… before any teardown: %q, %v", id, body, err)
			}
		}
		for _, gone := range []int{0, 2} { // "ab", then the first long id, namespaces deleted first
			id := ids[gone]
			stops[id]()
			workloads[id].Delete()
			if err := c.Teardown(ctxFor(t, time.Minute), &cninet.Allocation{ID: id, Ports: []cninet.Port{{Value: 28110 + gone, To: 8080}}}, workloads[id].Path); err != nil {
				t.Fatal(err)
			}
		}
		for _, kept := range []int{1, 3} {
			if body, err := fetch(nw.gw4, 28110+kept); err != nil || body != fmt.Sprintf("hello from %d", kept) {
				t.Fatalf("%.12s… after the others' teardown: %q, %v", ids[kept], body, err)
			}
		}
		for _, kept := range []int{1, 3} {
			if err := c.Teardown(ctxFor(t, time.Minute), &cninet.Allocation{ID: ids[kept], Ports: []cninet.Port{{Value: 28110 + kept, To: 8080}}}, workloads[ids[kept]].Path); err != nil {
				t.Fatal(err)
			}
			workloads[ids[kept]].Delete()
		}
		assertNoLeaks(t, base, nw.allowance())
	})
}
