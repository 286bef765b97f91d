package footprint_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
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
	lives, seams, _ := checkFixture(b, 1000)
	for _, firewallUnchanged := range []bool{false, true} {
		check := func() []footprint.Health {
			c := footprint.NewChecker(context.Background(), seams)
			c.Shallow = true // as the watcher's pass: no devices
			c.FirewallUnchanged = firewallUnchanged
			return c.Check(lives)
		}
		name := "firewall read"
		if firewallUnchanged {
			name = "firewall unchanged" // the watcher's periodic pass on a quiet iptables-nft host
		}
		b.Run(name, func(b *testing.B) {
			for _, h := range check() {
				if len(h.Missing) > 0 || h.Err != nil {
					b.Fatalf("%s: missing %q, %v", h.Live.ID, missing(h), h.Err)
				}
			}
			b.ReportAllocs()
			for b.Loop() {
				check()
			}
		})
	}
}

// checkFixture is n whole attachments of one network on a fake host:
// their masquerade, DNAT and forward rules among each other's in the
// shared chains, their reservations and cached results; v4 is the host's
// iptables.
func checkFixture(tb testing.TB, n int) (lives []*footprint.Live, seams footprint.Seams, v4 *fakes.IPTables) {
	dir := tb.TempDir()
	ipam := filepath.Join(dir, "ipam")
	v4 = fakes.NewIPTables()
	v4.Load("nat", fakes.SharedNAT)
	v4.Load("filter", fakes.SharedFilter("NOMAD-ADMIN"))
	lives = make([]*footprint.Live, n)
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
		writeFile(tb, filepath.Join(ipam, "nomad", addr.String()), id+"\r\neth0")
		writeFile(tb, filepath.Join(l.Net.CacheDir, "results", "nomad-"+id+"-eth0"), `{"kind":"cniCacheV1"}`)
		lives[i] = l
	}
	seams = footprint.Seams{
		IPTables: func(v6 bool) (host.IPTables, error) {
			return fakes.Saving{Batching: &fakes.Batching{IPTables: v4}}, nil
		},
		NFTables: func() (host.NFTables, error) { return &fakes.NFTables{}, nil },
	}
	return lives, seams, v4
}

// A check told the firewall is unchanged leaves it out, and still sees
// what went of the rest; told nothing, it sees both.
func TestACheckOfAnUnchangedFirewallReadsOnlyTheRest(t *testing.T) {
	lives, seams, v4 := checkFixture(t, 2)
	for _, r := range v4.Rules("nat", "CNI-HOSTPORT-DNAT") {
		if strings.Contains(r, lives[0].DNATChain()) {
			v4.Unload("nat", r) // the attachment's DNAT jump
		}
	}
	reservation := filepath.Join(lives[0].Net.IPAMDirs[0], lives[0].Result.IPs[0].Addr.Addr().String())
	if err := os.Remove(reservation); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name              string
		firewallUnchanged bool
		wantRules         bool
	}{
		{"a check of everything sees the rules and the reservation gone", false, true},
		{"a check of an unchanged firewall sees the reservation gone, and no rule", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := footprint.NewChecker(context.Background(), seams)
			c.Shallow, c.FirewallUnchanged = true, tc.firewallUnchanged
			h := c.Check(lives[:1])[0]
			var rules, reservations int
			for _, m := range h.Missing {
				switch m.Kind {
				case footprint.KindRule, footprint.KindChain:
					rules++
				case footprint.KindReservation:
					reservations++
				}
			}
			if reservations != 1 || (rules > 0) != tc.wantRules {
				t.Fatalf("missing %d rules or chains and %d reservations, want rules %v and 1 reservation: %q", rules, reservations, tc.wantRules, missing(h))
			}
		})
	}
}
