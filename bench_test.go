package cninet_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/identity"
	"github.com/seed1280861d/cninet/internal/registry"
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
	// A path nothing is at: the fake plugins never enter it, and cninet
	// looks at no namespace of the host's.
	netns := filepath.Join(b.TempDir(), "netns-bench")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := c.Setup(ctx, alloc, netns); err != nil {
			b.Fatal(err)
		}
		if err := c.Teardown(ctx, alloc, netns); err != nil {
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

// BenchmarkGCScale measures one GC over n leaked attachments of one
// network (IPv4 and IPv6 each) in two shapes, so that the ratio of the
// sizes shows whether any part of GC grows faster than the leak:
//
//   - sweep: what a crashed runner leaves — the plugins' iptables rules
//     and host-local's reservations, nothing cached or recorded; the
//     sweep removes it.
//   - reboot: what a host leaves after a reboot — no rules and no
//     reservations (the kernel and tmpfs forgot them), but libcni's cached
//     result and the host registry's record of every attachment; GC
//     detaches each recorded attachment as Teardown does.
func BenchmarkGCScale(b *testing.B) {
	for _, shape := range []string{"sweep", "reboot"} {
		for _, n := range []int{1000, 10000} {
			b.Run(fmt.Sprintf("shape=%s/n=%d", shape, n), func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					b.StopTimer()
					c := leakedHost(b, shape, n)
					b.StartTimer()
					report, err := c.GC(context.Background(), []string{})
					if err != nil {
						b.Fatal(err)
					}
					if got := len(report.IDs()); got != n {
						b.Fatalf("GC collected %d attachments, want %d", got, n)
					}
				}
			})
		}
	}
}

// leakedAttachment is attachment i of the scale benchmarks' network.
func leakedAttachment(i int) (v4, v6 footprint) {
	id := fmt.Sprintf("dead-%05d", i)
	return footprint{network: "nomad", id: id, ip: fmt.Sprintf("198.18.%d.%d", i/250, 2+i%250)},
		footprint{network: "nomad", id: id, ip: fmt.Sprintf("fd00:198:18::%x", 2+i), v6: true}
}

// leakedHost returns a Configurator over fakes and temporary directories
// holding n leaked attachments in shape (see BenchmarkGCScale).
func leakedHost(b *testing.B, shape string, n int) *cninet.Configurator {
	b.Helper()
	dataDir, cacheDir, stateDir, netnsDir := b.TempDir(), b.TempDir(), b.TempDir(), b.TempDir()
	cfg := cninet.DefaultBridgeConfig()
	cfg.NetworkName, cfg.IPv4Subnet, cfg.IPv6Subnet, cfg.IPAMDataDir = "nomad", "198.18.0.0/16", "fd00:198:18::/64", dataDir
	conf, err := cninet.BridgeConfList(cfg)
	if err != nil {
		b.Fatal(err)
	}
	var nat4, filter4, nat6, filter6 strings.Builder
	for _, dir := range []string{filepath.Join(dataDir, "nomad"), filepath.Join(cacheDir, "results")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	for i := 0; i < n; i++ {
		v4, v6 := leakedAttachment(i)
		switch shape {
		case "sweep":
			for _, fp := range []footprint{v4, v6} {
				nat, filter := &nat4, &filter4
				if fp.v6 {
					nat, filter = &nat6, &filter6
				}
				nat.WriteString(fp.nat() + "\n")
				filter.WriteString(fp.filter() + "\n")
				writeBenchFile(b, filepath.Join(dataDir, "nomad", fp.ip), fp.id+"\r\neth0")
			}
		case "reboot":
			netns := filepath.Join(netnsDir, v4.id) // nothing is there: a reboot took the namespaces
			writeCachedResult(b, cacheDir, netns, conf, v4, v6)
			writeRecord(b, stateDir, netns, conf, v4, v6)
		}
	}
	v4 := &fakes.Batching{IPTables: fakes.NewIPTables().Load("nat", sharedNat+"\n"+nat4.String()).Load("filter", sharedFilter+"\n"+filter4.String())}
	v6 := &fakes.Batching{IPTables: fakes.NewIPTables().Load("nat", sharedNat+"\n"+nat6.String()).Load("filter", sharedFilter+"\n"+filter6.String())}
	c, err := cninet.New(cninet.Config{CacheDir: cacheDir, StateDir: stateDir, Owner: "bench", NFTables: noNFTables, ConfList: conf, CNI: &fakes.CNI{},
		IPTables: func(ipv6 bool) (host.IPTables, error) {
			if ipv6 {
				return v6, nil
			}
			return v4, nil
		}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// benchPort is the host port every leaked attachment maps to 8080.
var benchPort = []map[string]any{{"hostPort": 28080, "containerPort": 8080, "protocol": "tcp"}}

// writeCachedResult writes libcni's cached result of the attachment, as
// libcni writes it after an ADD.
func writeCachedResult(b *testing.B, cacheDir, netns string, conf []byte, v4, v6 footprint) {
	b.Helper()
	raw, err := json.Marshal(map[string]any{
		"kind": "cniCacheV1", "containerId": v4.id, "config": conf, "ifName": "eth0", "networkName": v4.network,
		"netns": netns, "cniArgs": [][2]string{{"NOMAD_ALLOC_ID", v4.id}},
		"capabilityArgs": map[string]any{"portMappings": benchPort},
		"result": map[string]any{"cniVersion": "1.0.0",
			"interfaces": []map[string]any{{"name": "eth0", "sandbox": netns}},
			"ips":        []map[string]any{{"address": v4.ip + "/16", "interface": 0}, {"address": v6.ip + "/64", "interface": 0}}},
	})
	if err != nil {
		b.Fatal(err)
	}
	writeBenchFile(b, filepath.Join(cacheDir, "results", v4.network+"-"+v4.id+"-eth0"), string(raw))
}

// writeRecord writes the host registry's record of the attachment, as
// Setup leaves it: attached, with its addresses, args and port mappings.
func writeRecord(b *testing.B, stateDir, netns string, conf []byte, v4, v6 footprint) {
	b.Helper()
	ports, _ := json.Marshal(benchPort)
	rec := registry.Record{Version: registry.FormatVersion, Owner: "bench", Key: identity.Key{Network: v4.network, ID: v4.id, IfName: "eth0"},
		NetNS: netns, State: registry.Attached,
		Addresses: []netip.Addr{netip.MustParseAddr(v4.ip), netip.MustParseAddr(v6.ip)},
		Args:      [][2]string{{"NOMAD_ALLOC_ID", v4.id}}, Capabilities: map[string]json.RawMessage{"portMappings": ports},
		ConfList: conf, Plugins: []registry.Plugin{{Type: "loopback"}, {Type: "bridge", Backend: "iptables"}, {Type: "firewall", Backend: "iptables"}, {Type: "portmap", Backend: "iptables"}},
		Since: time.Now().UTC(), Updated: time.Now().UTC()}
	raw, err := json.Marshal(rec)
	if err != nil {
		b.Fatal(err)
	}
	dir := filepath.Join(stateDir, "attachments", v4.id, v4.network)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		b.Fatal(err)
	}
	writeBenchFile(b, filepath.Join(dir, "eth0"), string(raw))
}

func writeBenchFile(b *testing.B, path, body string) {
	b.Helper()
	if err := os.WriteFile(path, []byte(body), 0o600); err != nil {
		b.Fatal(err)
	}
}
