package cninet

import (
	"fmt"
	"net"
	"net/netip"
	"sort"

	cni "github.com/containerd/go-cni"
)

// NetworkStatus is what Setup learned about the workload. Its IfName,
// Address, AddressIPv6 and DNS are the first network's (the default
// network's, for an allocation that names none); Interfaces has every
// network's.
type NetworkStatus struct {
	// IfName is the interface the address was taken from.
	IfName string
	// Address is the interface's first IPv4 address, or its first IPv6
	// address when it has no IPv4 one. Always valid in a returned status,
	// except Connect's with ConnectOptions.IfName of a network whose
	// result holds no address (an L2-only conflist).
	Address netip.Addr
	// AddressIPv6 is the interface's first IPv6 address; invalid (the zero
	// Addr) when it has none.
	AddressIPv6 netip.Addr
	// DNS is the first DNS configuration in the result that names a
	// nameserver; nil when none does.
	DNS *DNSConfig
	// Interfaces are the workload's interfaces, one per network it
	// joined, in the allocation's order. Setup fills it; StatusFromResult,
	// which does not know the network, leaves it nil.
	Interfaces []InterfaceStatus
}

// InterfaceStatus is what Setup learned about one network of the
// workload, chosen from that network's result as StatusFromResult chooses.
type InterfaceStatus struct {
	// Network is the CNI network's name.
	Network string
	// IfName is the workload's interface in this network
	// (<prefix>0, <prefix>1, … in the allocation's order).
	IfName string
	// Address is the interface's first IPv4 address, else its first IPv6.
	Address netip.Addr
	// AddressIPv6 is the interface's first IPv6 address, if any.
	AddressIPv6 netip.Addr
	// DNS is the network's DNS configuration; nil when it names no
	// nameserver.
	DNS *DNSConfig
}

// add records one network's status; the first also fills the top-level
// fields, which callers of a single network read.
func (s *NetworkStatus) add(network string, st *NetworkStatus) {
	if len(s.Interfaces) == 0 {
		s.IfName, s.Address, s.AddressIPv6, s.DNS = st.IfName, st.Address, st.AddressIPv6, st.DNS
	}
	s.Interfaces = append(s.Interfaces, InterfaceStatus{Network: network, IfName: st.IfName,
		Address: st.Address, AddressIPv6: st.AddressIPv6, DNS: st.DNS})
}

// DNSConfig is the DNS configuration a plugin asked the workload to use.
type DNSConfig struct {
	Servers  []string `json:"servers"`
	Searches []string `json:"searches,omitempty"`
	Options  []string `json:"options,omitempty"`
}

// StatusFromResult picks the workload's address from a CNI result,
// deterministically although go-cni reports interfaces in a map: interfaces
// are taken in name order; the first one that is in the sandbox (non-empty
// Sandbox) and has an address wins, failing that the first one with an
// address. Nil interfaces and nil or unspecified IPs (0.0.0.0, ::) are
// skipped. A result without any usable address is an ErrNoAddress error.
func StatusFromResult(res *cni.Result) (*NetworkStatus, error) {
	if res == nil {
		return nil, fmt.Errorf("%w: result is nil", ErrNoAddress)
	}
	name, v4, v6, ok := chooseInterface(res.Interfaces)
	if !ok {
		return nil, fmt.Errorf("%w: none of %d interfaces has a usable IP", ErrNoAddress, len(res.Interfaces))
	}
	status := &NetworkStatus{IfName: name, Address: v4, AddressIPv6: v6, DNS: dnsFromResult(res)}
	if !v4.IsValid() {
		status.Address = v6
	}
	return status, nil
}

func chooseInterface(ifaces map[string]*cni.Config) (name string, v4, v6 netip.Addr, ok bool) {
	names := make([]string, 0, len(ifaces))
	for n, cfg := range ifaces {
		if cfg != nil {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, sandboxOnly := range []bool{true, false} {
		for _, n := range names {
			cfg := ifaces[n]
			if sandboxOnly && cfg.Sandbox == "" {
				continue
			}
			if v4, v6 = firstAddrs(cfg.IPConfigs); v4.IsValid() || v6.IsValid() {
				return n, v4, v6, true
			}
		}
	}
	return "", netip.Addr{}, netip.Addr{}, false
}

// firstAddrs returns the first usable IPv4 and IPv6 address among ips.
func firstAddrs(ips []*cni.IPConfig) (v4, v6 netip.Addr) {
	for _, ipc := range ips {
		if ipc == nil {
			continue
		}
		a, ok := usableAddr(ipc.IP)
		switch {
		case !ok:
		case a.Is4() && !v4.IsValid():
			v4 = a
		case a.Is6() && !v6.IsValid():
			v6 = a
		}
	}
	return v4, v6
}

func usableAddr(ip net.IP) (netip.Addr, bool) {
	a, ok := netip.AddrFromSlice(ip)
	a = a.Unmap() // net.IP keeps IPv4 in 16 bytes; ::ffff:0.0.0.0 is 0.0.0.0
	if !ok || a.IsUnspecified() {
		return netip.Addr{}, false
	}
	return a, true
}

func dnsFromResult(res *cni.Result) *DNSConfig {
	for _, d := range res.DNS {
		if len(d.Nameservers) > 0 {
			return &DNSConfig{
				Servers:  append([]string(nil), d.Nameservers...),
				Searches: append([]string(nil), d.Search...),
				Options:  append([]string(nil), d.Options...),
			}
		}
	}
	return nil
}
