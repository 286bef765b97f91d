package cninet_test

import (
	"errors"
	"net"
	"net/netip"
	"testing"

	cni "github.com/containerd/go-cni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/seed1280861d/cninet"
)

func ipc(ips ...string) []*cni.IPConfig {
	var out []*cni.IPConfig
	for _, s := range ips {
		if s == "<nil>" {
			out = append(out, &cni.IPConfig{})
			continue
		}
		out = append(out, &cni.IPConfig{IP: net.ParseIP(s)})
	}
	return out
}

func TestStatusFromResult(t *testing.T) {
	cases := []struct {
		name           string
		ifaces         map[string]*cni.Config
		wantIface      string
		wantV4, wantV6 string
	}{
		{
			name:      "sandbox interface wins over host-side interfaces sorted before it",
			ifaces:    map[string]*cni.Config{"eth0": {Sandbox: "/var/run/netns/a", IPConfigs: ipc("198.18.0.5")}, "a-bridge": {IPConfigs: ipc("198.18.0.1")}, "veth1": {}},
			wantIface: "eth0", wantV4: "198.18.0.5",
		},
		{
			name:      "without a sandbox interface the first interface by name with an address wins",
			ifaces:    map[string]*cni.Config{"zz0": {IPConfigs: ipc("198.18.0.9")}, "bb0": {IPConfigs: ipc("198.18.0.8")}, "aa0": {}},
			wantIface: "bb0", wantV4: "198.18.0.8",
		},
		{
			name:      "of several sandbox interfaces the first by name wins",
			ifaces:    map[string]*cni.Config{"eth1": {Sandbox: "x", IPConfigs: ipc("198.18.1.2")}, "eth0": {Sandbox: "x", IPConfigs: ipc("198.18.0.2")}},
			wantIface: "eth0", wantV4: "198.18.0.2",
		},
		{
			name:      "a sandbox interface without an address is passed over",
			ifaces:    map[string]*cni.Config{"eth0": {Sandbox: "x"}, "eth1": {Sandbox: "x", IPConfigs: ipc("198.18.1.2")}},
			wantIface: "eth1", wantV4: "198.18.1.2",
		},
		{
			name:      "nil interface entries are skipped",
			ifaces:    map[string]*cni.Config{"a": nil, "eth0": {Sandbox: "x", IPConfigs: ipc("198.18.0.2")}},
			wantIface: "eth0", wantV4: "198.18.0.2",
		},
		{
			name:      "dual stack reports the first IPv4 and the first IPv6 whatever their order",
			ifaces:    map[string]*cni.Config{"eth0": {Sandbox: "x", IPConfigs: ipc("fd00:198:18::2", "198.18.0.2", "fd00:198:18::3", "198.18.0.3")}},
			wantIface: "eth0", wantV4: "198.18.0.2", wantV6: "fd00:198:18::2",
		},
		{
			name:      "IPv6 only fills both Address and AddressIPv6",
			ifaces:    map[string]*cni.Config{"eth0": {Sandbox: "x", IPConfigs: ipc("fd00:198:18::2")}},
			wantIface: "eth0", wantV4: "fd00:198:18::2", wantV6: "fd00:198:18::2",
		},
		{
			name:      "unspecified and nil IPs are not addresses",
			ifaces:    map[string]*cni.Config{"eth0": {Sandbox: "x", IPConfigs: ipc("0.0.0.0", "::", "<nil>")}, "eth1": {Sandbox: "x", IPConfigs: append(ipc("198.18.1.2"), nil)}},
			wantIface: "eth1", wantV4: "198.18.1.2",
		},
		{
			name:      "an IPv4-mapped IPv6 address counts as IPv4",
			ifaces:    map[string]*cni.Config{"eth0": {Sandbox: "x", IPConfigs: []*cni.IPConfig{{IP: net.ParseIP("198.18.0.7").To16()}}}},
			wantIface: "eth0", wantV4: "198.18.0.7",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for i := 0; i < 20; i++ { // map order varies between runs; the answer must not
				st, err := cninet.StatusFromResult(&cni.Result{Interfaces: tc.ifaces})
				if err != nil {
					t.Fatalf("StatusFromResult: %v", err)
				}
				if st.IfName != tc.wantIface || st.Address != netip.MustParseAddr(tc.wantV4) {
					t.Fatalf("got %s %s, want %s %s", st.IfName, st.Address, tc.wantIface, tc.wantV4)
				}
				wantV6 := netip.Addr{}
				if tc.wantV6 != "" {
					wantV6 = netip.MustParseAddr(tc.wantV6)
				}
				if st.AddressIPv6 != wantV6 {
					t.Fatalf("AddressIPv6 = %s, want %s", st.AddressIPv6, wantV6)
				}
			}
		})
	}
}

func TestStatusFromResultWithoutAddressIsErrNoAddress(t *testing.T) {
	for name, res := range map[string]*cni.Result{
		"nil result":                 nil,
		"no interfaces":              {},
		"interfaces without IPs":     {Interfaces: map[string]*cni.Config{"eth0": {Sandbox: "x"}, "lo": nil}},
		"only unspecified addresses": {Interfaces: map[string]*cni.Config{"eth0": {IPConfigs: ipc("0.0.0.0", "::")}}},
	} {
		t.Run(name, func(t *testing.T) {
			st, err := cninet.StatusFromResult(res)
			if !errors.Is(err, cninet.ErrNoAddress) || st != nil {
				t.Fatalf("got %v, %v; want nil, ErrNoAddress", st, err)
			}
		})
	}
}

func TestStatusFromResultDNS(t *testing.T) {
	ifaces := map[string]*cni.Config{"eth0": {Sandbox: "x", IPConfigs: ipc("198.18.0.2")}}
	cases := []struct {
		name string
		dns  []types.DNS
		want *cninet.DNSConfig
	}{
		{"no DNS in the result gives nil", nil, nil},
		{"DNS without a nameserver gives nil", []types.DNS{{Search: []string{"svc"}}}, nil},
		{"the first DNS entry with a nameserver is used", []types.DNS{{Search: []string{"skip"}}, {Nameservers: []string{"198.18.0.53"}, Search: []string{"svc"}, Options: []string{"ndots:2"}}},
			&cninet.DNSConfig{Servers: []string{"198.18.0.53"}, Searches: []string{"svc"}, Options: []string{"ndots:2"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st, err := cninet.StatusFromResult(&cni.Result{Interfaces: ifaces, DNS: tc.dns})
			if err != nil {
				t.Fatal(err)
			}
			if (st.DNS == nil) != (tc.want == nil) {
				t.Fatalf("DNS = %+v, want %+v", st.DNS, tc.want)
			}
			if tc.want != nil && (st.DNS.Servers[0] != tc.want.Servers[0] || st.DNS.Searches[0] != tc.want.Searches[0] || st.DNS.Options[0] != tc.want.Options[0]) {
				t.Fatalf("DNS = %+v, want %+v", st.DNS, tc.want)
			}
		})
	}
}
