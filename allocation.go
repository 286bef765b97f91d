package cninet

import (
	"fmt"
	"net/netip"
	"slices"

	cni "github.com/containerd/go-cni"
	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// Allocation is the workload whose network namespace is attached. It is
// only read: cninet never modifies an Allocation or its slices and maps.
type Allocation struct {
	// ID is the CNI container ID. It must match ^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$.
	// Teardown, Check and GC find the attachment by this ID alone.
	ID string
	// Ports are the group's ports. When non-empty they are the only ports
	// mapped.
	Ports []Port
	// NetworkPorts are the legacy per-network ports (Nomad's
	// NetworkResource); used only when Ports is empty.
	NetworkPorts []NetworkPorts
	// NetworkNames are the CNI networks the workload joins, in order: the
	// first gets interface <prefix>0, the next <prefix>1, and so on. Each
	// must be a network the Configurator knows, at most once. Empty: the
	// Configurator's default network. Teardown and Check must be given the
	// same names as Setup; they also cover the networks added with
	// Connect, named here or not, and skip one removed with Disconnect.
	NetworkNames []string
	// Args are extra CNI args (CNI_ARGS), such as the orchestrator's identity
	// args, sent sorted by key after IgnoreUnknown=1 (which cninet adds,
	// so Args may not name it). Keys must not contain ';' or '=', values
	// not ';': a value may hold '=', since each pair splits at its first
	// '='.
	Args map[string]string
	// ExactArgs sends Args as they are: cninet adds no IgnoreUnknown=1,
	// and Args may name IgnoreUnknown with any value. It is for a CNI
	// runtime's own CNI_ARGS, passed on as the runtime sent them (cninet
	// daemon does this): plugins then refuse args they do not know unless
	// the runtime said IgnoreUnknown.
	ExactArgs bool
	// Capabilities are CNI capability arguments besides the port mappings
	// (which Ports gives): "aliases", "ips", "mac", "bandwidth",
	// "ipRanges", "dns" and any other a plugin declares, each value
	// passed to the plugins unchanged (it must marshal to JSON). A
	// network gets only the capabilities its conflist declares, as with
	// port mappings; libcni hands each plugin only the ones it declares.
	// See ValidateCapabilities.
	Capabilities map[string]any
}

// Port maps a host port to a port in the workload's namespace.
type Port struct {
	// Label names the port for humans; it is not sent to the plugins.
	Label string
	// Value is the host port, 1–65535.
	Value int
	// To is the port inside the namespace; To < 1 means To = Value.
	To int
	// HostIP restricts the mapping to one host address; "" means all.
	// Ignored for legacy Networks ports and with Config.IgnorePortMappingHostIP.
	HostIP string
	// Protocol is "tcp", "udp" or "sctp" to map only that protocol; ""
	// maps tcp and udp.
	Protocol string
}

// NetworkPorts is the legacy per-network port list of an allocation.
type NetworkPorts struct {
	ReservedPorts, DynamicPorts []Port
}

// allocID is alloc's id for a span or an error, before alloc is
// validated.
func allocID(alloc *Allocation) string {
	if alloc == nil {
		return ""
	}
	return alloc.ID
}

// checkContainerID is an ErrInvalidAllocation error when id is not a
// CNI container id.
func checkContainerID(id string) error {
	if !footprint.IsContainerID(id) {
		return fmt.Errorf("%w: id %q is not a CNI container id (want ^[a-zA-Z0-9][a-zA-Z0-9_.\\-]*$)", ErrInvalidAllocation, id)
	}
	return nil
}

// validateAllocation rejects what no plugin should ever see, before anything
// on the host changes.
func validateAllocation(alloc *Allocation) error {
	if alloc == nil {
		return fmt.Errorf("%w: allocation is nil", ErrInvalidAllocation)
	}
	if err := checkContainerID(alloc.ID); err != nil {
		return err
	}
	seen := make(map[string]bool, len(alloc.NetworkNames))
	for _, name := range alloc.NetworkNames {
		if !catalog.NameRule.MatchString(name) {
			return fmt.Errorf("%w: allocation %s: network name %q does not match %s", ErrInvalidAllocation, alloc.ID, name, catalog.NameRule)
		}
		if seen[name] {
			return fmt.Errorf("%w: allocation %s joins network %q twice", ErrInvalidAllocation, alloc.ID, name)
		}
		seen[name] = true
	}
	return nil
}

// PortMappings turns the allocation's ports into the portMappings capability
// of the portmap plugin: every port once for tcp and once for udp (unless
// it names one protocol), group
// Ports when present, else the legacy Networks' reserved then dynamic ports.
// With ignoreHostIP the group ports' HostIP is dropped.
//
// A port outside 1–65535, an unparsable HostIP, or two mappings of the same
// host port, protocol and host IP is an ErrInvalidAllocation error. An
// allocation without ports yields an empty, non-nil slice.
func PortMappings(alloc *Allocation, ignoreHostIP bool) ([]cni.PortMapping, error) {
	if alloc == nil {
		return nil, fmt.Errorf("%w: allocation is nil", ErrInvalidAllocation)
	}
	ports, withHostIP := alloc.Ports, !ignoreHostIP
	if len(ports) == 0 {
		ports, withHostIP = legacyPorts(alloc.NetworkPorts), false
	}
	mappings := make([]cni.PortMapping, 0, 2*len(ports))
	seen := make(map[cni.PortMapping]string, 2*len(ports))
	for _, p := range ports {
		hostIP := ""
		if withHostIP {
			hostIP = p.HostIP
		}
		if err := validatePort(p, hostIP); err != nil {
			return nil, err
		}
		to := p.To
		if to < 1 {
			to = p.Value
		}
		for _, proto := range protocols(p.Protocol) {
			m := cni.PortMapping{HostPort: int32(p.Value), ContainerPort: int32(to), Protocol: proto, HostIP: hostIP}
			key := m
			key.ContainerPort = 0
			if prev, dup := seen[key]; dup {
				return nil, fmt.Errorf("%w: port %q maps host port %d/%s%s already mapped by port %q",
					ErrInvalidAllocation, p.Label, p.Value, proto, onHostIP(hostIP), prev)
			}
			seen[key] = p.Label
			mappings = append(mappings, m)
		}
	}
	return mappings, nil
}

// legacyPorts copies into a new slice, so the caller's slices are never
// appended to.
func legacyPorts(networks []NetworkPorts) []Port {
	var ports []Port
	for _, n := range networks {
		ports = append(ports, n.ReservedPorts...)
		ports = append(ports, n.DynamicPorts...)
	}
	return ports
}

func validatePort(p Port, hostIP string) error {
	if p.Value < 1 || p.Value > 65535 {
		return fmt.Errorf("%w: port %q has host port %d, want 1-65535", ErrInvalidAllocation, p.Label, p.Value)
	}
	if p.To > 65535 {
		return fmt.Errorf("%w: port %q maps to port %d, want 1-65535 (or < 1 for the host port)", ErrInvalidAllocation, p.Label, p.To)
	}
	if p.Protocol != "" && !slices.Contains(portProtocols, p.Protocol) {
		return fmt.Errorf("%w: port %q has protocol %q, want tcp, udp, sctp or empty for tcp and udp", ErrInvalidAllocation, p.Label, p.Protocol)
	}
	if hostIP != "" {
		if _, err := netip.ParseAddr(hostIP); err != nil {
			return fmt.Errorf("%w: port %q has host IP %q, want an IPv4 or IPv6 address", ErrInvalidAllocation, p.Label, hostIP)
		}
	}
	return nil
}

// portProtocols are the protocols a Port can map: the ones the portmap
// plugin maps.
var portProtocols = []string{"tcp", "udp", "sctp"}

func protocols(p string) []string {
	if p == "" {
		return []string{"tcp", "udp"}
	}
	return []string{p}
}

func onHostIP(ip string) string {
	if ip == "" {
		return ""
	}
	return " on " + ip
}
