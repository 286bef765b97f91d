package footprint

import (
	"encoding/json"
	"net/netip"
	"slices"
)

// Live is one live attachment as its record tells it: what a drift check
// expects on the host (Checker) and what a repair restores. The caller
// builds it from the host registry's record and the ADD's result.
type Live struct {
	// Attachment is the network and the container id the plugins know
	// the attachment by.
	Attachment
	// IfName is the workload's interface; NetNS the namespace the ADD was
	// given.
	IfName, NetNS string
	// Net is the network as its recorded conflist defines it (NetworkOf),
	// with CacheDir set.
	Net Network
	// Backends are the backends the network's plugins really used, by
	// plugin type ("iptables" or "nftables"; none for a plugin without
	// one).
	Backends map[string]string
	// Uncached says the attachment's CNI keeps libcni's cache where cninet
	// does not look (an injected Config.CNI): it is not expected.
	Uncached bool
	// Result is what the ADD returned; nil when neither the record nor
	// libcni's cache holds it, and then only the cached result itself is
	// expected.
	Result *Result
	// Mappings are the port mappings the plugins were given, and
	// Capabilities every capability argument (portMappings among them),
	// as libcni passed them.
	Mappings     []PortMapping
	Capabilities map[string]json.RawMessage
}

// Result is the part of a CNI result a check reads: the interfaces the
// plugins made and the addresses they gave.
type Result struct {
	Interfaces []ResultInterface
	IPs        []ResultIP
	// Raw is the result as JSON (libcni's cache keeps it so): what a
	// repair writes back when the cache file is gone.
	Raw json.RawMessage
}

// ResultInterface is one interface of a result.
type ResultInterface struct {
	Name, MAC, Sandbox string
}

// ResultIP is one address of a result and the interface it is on (-1:
// the result does not say).
type ResultIP struct {
	Addr      netip.Prefix
	Interface int
}

// PortMapping is one port mapping as the plugins are given it
// (capability portMappings).
type PortMapping struct {
	HostPort      int    `json:"hostPort"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"hostIP,omitempty"`
}

// backend returns the backend the plugin of type typ used, "" when none
// is recorded.
func (l *Live) backend(typ string) string { return l.Backends[typ] }

// addrs returns the result's addresses of one family (v6), in order.
func (l *Live) addrs(v6 bool) []netip.Prefix {
	if l.Result == nil {
		return nil
	}
	var out []netip.Prefix
	for _, ip := range l.Result.IPs {
		if ip.Addr.Addr().Is6() == v6 && ip.Addr.IsValid() {
			out = append(out, ip.Addr)
		}
	}
	return out
}

// allAddrs returns every address of the result, IPv4 first.
func (l *Live) allAddrs() []netip.Prefix { return append(l.addrs(false), l.addrs(true)...) }

// sandboxAddr returns the first address of family v6 on the workload's
// own interface, as portmap picks the address it maps ports to: an
// address that names an interface counts only when that interface is
// IfName inside a sandbox.
func (l *Live) sandboxAddr(v6 bool) (netip.Prefix, bool) {
	if l.Result == nil {
		return netip.Prefix{}, false
	}
	for _, ip := range l.Result.IPs {
		if !ip.Addr.IsValid() || ip.Addr.Addr().Is6() != v6 {
			continue
		}
		if i := ip.Interface; i >= 0 && i < len(l.Result.Interfaces) {
			if intf := l.Result.Interfaces[i]; intf.Name != l.IfName || intf.Sandbox == "" {
				continue
			}
		}
		return ip.Addr, true
	}
	return netip.Prefix{}, false
}

// workloadInterface returns the result's interface in the workload's
// namespace, named IfName.
func (l *Live) workloadInterface() (ResultInterface, bool) {
	if l.Result == nil {
		return ResultInterface{}, false
	}
	i := slices.IndexFunc(l.Result.Interfaces, func(r ResultInterface) bool { return r.Name == l.IfName && r.Sandbox != "" })
	if i < 0 {
		return ResultInterface{Name: l.IfName}, true // a result that lists no interface still made this one
	}
	return l.Result.Interfaces[i], true
}

// mappings returns the port mappings portmap applies to an address of
// family v6: those without a host IP, or with one of the same family.
func (l *Live) mappings(v6 bool) []PortMapping {
	var out []PortMapping
	for _, m := range l.Mappings {
		if m.HostIP != "" {
			if ip, err := netip.ParseAddr(m.HostIP); err == nil && ip.Is6() != v6 {
				continue
			}
		}
		out = append(out, m)
	}
	return out
}
