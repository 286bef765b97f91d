package cninettest_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/cninettest"
)

// allocRunner is an orchestrator's allocation runner, reduced to its
// network: Start attaches the allocation's namespace, Stop detaches it.
type allocRunner struct {
	net   *cninet.Configurator
	alloc *cninet.Allocation
	netns string
}

func (r *allocRunner) Start(ctx context.Context) (netip.Addr, error) {
	res, err := r.net.Setup(ctx, r.alloc, r.netns)
	if err != nil {
		return netip.Addr{}, err
	}
	return res.Address, nil
}

func (r *allocRunner) Stop(ctx context.Context) error {
	return r.net.Teardown(ctx, r.alloc, r.netns)
}

// An allocation runner unit-tested on the fakes, without root and
// without plugins: Start gets an address, the fake host holds the
// allocation's rules, and after Stop nothing of it is left, even though
// the fake plugins' DEL leaks everything here: Teardown's own cleanup
// removed it. In a test, give New t.TempDir().
func Example() {
	dir, err := os.MkdirTemp("", "cninettest-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	env, err := cninettest.New(dir)
	if err != nil {
		panic(err)
	}
	env.CNI.LeakOnRemove = true // a DEL that lost its cached result
	c, err := cninet.New(env.Config)
	if err != nil {
		panic(err)
	}
	defer c.Close()
	r := &allocRunner{net: c, netns: "/var/run/netns/web-1",
		alloc: &cninet.Allocation{ID: "web-1", Ports: []cninet.Port{{Label: "http", Value: 8080, To: 80}}}}

	ctx := context.Background()
	addr, err := r.Start(ctx)
	if err != nil {
		panic(err)
	}
	fmt.Println("address:", addr)
	fp := env.CNI.Footprints("web-1")[0]
	fmt.Println("rules and chains while it runs:", len(env.Host.Leftovers(fp)))
	fmt.Println("DNAT:", env.Host.IPv4.Rules("nat", fp.DNATChain())[2])

	if err := r.Stop(ctx); err != nil {
		panic(err)
	}
	held, err := env.Reservations()
	if err != nil {
		panic(err)
	}
	fmt.Println("left after Stop:", len(env.Host.Leftovers(fp)), "rules and chains,", len(held), "addresses")
	// Output:
	// address: 198.18.0.2
	// rules and chains while it runs: 15
	// DNAT: -A CNI-DN-22234ff10a6d1febef479 -p tcp -m tcp --dport 8080 -j DNAT --to-destination 198.18.0.2:80
	// left after Stop: 0 rules and chains, 0 addresses
}
