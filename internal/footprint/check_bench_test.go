package footprint_test

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"

	cni "github.com/containerd/go-cni"
	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// BenchmarkCheck1000Attachments checks 1,000 whole attachments of one
// network in one read of the host (the repair watcher's pass, Drifts):
// their masquerade, DNAT and forward rules among each other's in the
// shared chains, their reservations and cached results.
func BenchmarkCheck1000Attachments(b *testing.B) {
	const n = 1000
	dir := b.TempDir()
	ipam, v4 := filepath.Join(dir, "ipam"), fakes.NewIPTables()
	v4.Load("nat", fakes.SharedNAT)
	v4.Load("filter", fakes.SharedFilter("NOMAD-ADMIN"))
	lives := make([]*footprint.Live, n)
	for i := range lives {
		id, addr := fmt.Sprintf("alloc-%04d", i), netip.AddrFrom4([4]byte{198, 18, byte(i / 250), byte(2 + i%250)})
		port := cni.PortMapping{HostPort: int32(20000 + i), ContainerPort: 80, Protocol: "tcp"}
		fp := fakes.Footprint{Network: "nomad", ID: id, Addr: netip.PrefixFrom(addr, 16), Masquerade: true, Ports: []cni.PortMapping{port},
			Firewall: true, AdminChain: "NOMAD-ADMIN"}
		v4.Load("nat", fp.NAT())
		v4.Load("filter", fp.Filter())
		l := &footprint.Live{
			Attachment: footprint.Attachment{Network: "nomad", ID: id},
			IfName:     "eth0",
			Net:        footprint.NetworkOf("nomad", nomadConf(ipam)),
			Backends:   map[string]string{"bridge": "iptables", "portmap": "iptables", "firewall": "iptables"},
			Result: &footprint.Result{Interfaces: []footprint.ResultInterface{{Name: "eth0", Sandbox: "/run/netns/w"}},
				IPs: []footprint.ResultIP{{Addr: netip.PrefixFrom(addr, 16), Interface: 0}}, Raw: []byte(`{"cniVersion":"1.0.0"}`)},
			Mappings: []footprint.PortMapping{{HostPort: 20000 + i, ContainerPort: 80, Protocol: "tcp"}},
		}
		l.Net.CacheDir = filepath.Join(dir, "cache")
		writeFile(b, filepath.Join(ipam, "nomad", addr.String()), id+"\r\neth0")
		writeFile(b, filepath.Join(l.Net.CacheDir, "results", "nomad-"+id+"-eth0"), `{"kind":"cniCacheV1"}`)
		lives[i] = l
	}
	seams := footprint.Seams{
		IPTables: func(v6 bool) (host.IPTables, error) {
			return fakes.Saving{Batching: &fakes.Batching{IPTables: v4}}, nil
		},
		NFTables: func() (host.NFTables, error) { return &fakes.NFTables{}, nil },
	}
	check := func() []footprint.Health {
		c := footprint.NewChecker(context.Background(), seams)
		c.Shallow = true // as the watcher's pass: no devices
		return c.Check(lives)
	}
	for _, h := range check() {
		if len(h.Missing) > 0 || h.Err != nil {
			b.Fatalf("%s: missing %q, %v", h.Live.ID, missing(h), h.Err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		check()
	}
}
