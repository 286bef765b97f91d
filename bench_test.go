package cninet_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
)

// BenchmarkSetupTeardown measures cninet's own work per workload: the
// plugins are a fake, iptables is in memory (whole-table listings, as on
// a host), and every Teardown runs the force cleanup.
func BenchmarkSetupTeardown(b *testing.B) {
	conf, _ := cninet.BridgeConfList(cninet.BridgeConfig{IPv4Subnet: "198.18.0.0/24", IPAMDataDir: b.TempDir()})
	v4 := &fakes.Batching{IPTables: fakes.NewIPTables().Load("nat", sharedNat).Load("filter", sharedFilter)}
	v6 := &fakes.Batching{IPTables: fakes.NewIPTables().Load("nat", sharedNat).Load("filter", sharedFilter)}
	c, err := cninet.New(cninet.Config{CacheDir: b.TempDir(), StateDir: b.TempDir(), NFTables: noNFTables, ConfList: conf, CNI: &fakes.CNI{}, IPTables: func(ipv6 bool) (host.IPTables, error) {
		if ipv6 {
			return v6, nil
		}
		return v4, nil
	}})
	if err != nil {
		b.Fatal(err)
	}
	alloc := &cninet.Allocation{ID: "bench-1", Ports: []cninet.Port{{Label: "http", Value: 28080, To: 8080}},
		Args: map[string]string{"NOMAD_ALLOC_ID": "bench-1"}}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Setup(ctx, alloc, "/var/run/netns/bench"); err != nil {
			b.Fatal(err)
		}
		if err := c.Teardown(ctx, alloc, "/var/run/netns/bench"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkGCSweep10kRules measures a GC sweep over a listing of 10,000
// rules (1,000 leaked attachments, IPv4), all of them dead.
func BenchmarkGCSweep10kRules(b *testing.B) {
	cf := newCleanupFixture(&testing.T{}, "nomad", tableByTable)
	listing := leakedListing(1000)
	conf := cf.c.ConfList()
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		v4 := &fakes.Batching{IPTables: fakes.NewIPTables().Load("nat", sharedNat+"\n"+listing.nat).Load("filter", sharedFilter+"\n"+listing.filter)}
		c, _ := cninet.New(cninet.Config{CacheDir: b.TempDir(), StateDir: b.TempDir(), NFTables: noNFTables, ConfList: conf, CNI: &fakes.CNI{}, IPTables: func(ipv6 bool) (host.IPTables, error) {
			if ipv6 {
				return fakes.NewIPTables(), nil
			}
			return v4, nil
		}})
		b.StartTimer()
		if _, err := c.GC(context.Background(), []string{}); err != nil {
			b.Fatal(err)
		}
	}
}

type listing struct{ nat, filter string }

func leakedListing(n int) listing {
	var nat, filter strings.Builder
	for i := 0; i < n; i++ {
		fp := footprint{network: "nomad", id: fmt.Sprintf("dead-%04d", i), ip: fmt.Sprintf("198.18.%d.%d", i/250, 2+i%250)}
		nat.WriteString(fp.nat() + "\n")
		filter.WriteString(fp.filter() + "\n")
	}
	return listing{nat.String(), filter.String()}
}
