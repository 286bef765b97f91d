package cninet

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
)

// The capability arguments a CNI runtime commonly passes besides port
// mappings (see the CNI conventions document). Allocation.Capabilities may
// carry any of these, and any other a plugin declares.
const (
	CapabilityAliases   = "aliases"   // network-scoped aliases of the workload (a list of names)
	CapabilityIPs       = "ips"       // static addresses the workload asks IPAM for
	CapabilityMAC       = "mac"       // the MAC address of the workload's interface
	CapabilityBandwidth = "bandwidth" // ingress and egress rates and bursts (the bandwidth plugin)
	CapabilityIPRanges  = "ipRanges"  // IPAM ranges to allocate from (host-local)
	CapabilityDNS       = "dns"       // nameservers, search domains and options
)

// capabilityPortMappings is the capability Ports (or the legacy Networks)
// give; Capabilities must not give it a second time.
const capabilityPortMappings = "portMappings"

// ValidateCapabilities checks capability arguments as Setup, Connect,
// Check and Teardown do before anything runs: every name is non-empty and
// not "portMappings" (port mappings come from Allocation.Ports, whose
// validation they need), and every value marshals to JSON, since that is
// how the plugins receive it. A violation is an ErrInvalidAllocation
// error naming the capability. A nil or empty map is valid.
func ValidateCapabilities(caps map[string]any) error {
	names := make([]string, 0, len(caps))
	for name := range caps {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		switch {
		case strings.TrimSpace(name) == "":
			return fmt.Errorf("%w: capability with an empty name, want a name such as %q", ErrInvalidAllocation, CapabilityBandwidth)
		case name == capabilityPortMappings:
			return fmt.Errorf("%w: capability %q is given by Allocation.Ports, not Capabilities", ErrInvalidAllocation, name)
		}
		if _, err := json.Marshal(caps[name]); err != nil {
			return fmt.Errorf("%w: capability %q: value cannot be passed to a plugin as JSON: %w", ErrInvalidAllocation, name, err)
		}
	}
	return nil
}

// declaredCapabilities is the capability arguments one network is given:
// the port mappings and each of req's other capabilities that a plugin of
// the network declares; nil when it declares none of them.
func declaredCapabilities(req request, info networkInfo) map[string]any {
	var out map[string]any
	set := func(name string, value any) {
		if out == nil {
			out = map[string]any{}
		}
		out[name] = value
	}
	if info.portMappings {
		set(capabilityPortMappings, req.mappings)
	}
	for name, value := range req.caps {
		if info.capabilities[name] {
			set(name, value)
		}
	}
	return out
}
