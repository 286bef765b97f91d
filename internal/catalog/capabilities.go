package catalog

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/seed1280861d/cninet/internal/errs"
)

// CapabilityPortMappings is the capability the port mappings are given
// as (from Allocation.Ports); the other capabilities must not give it a
// second time.
const CapabilityPortMappings = "portMappings"

// ValidateCapabilities checks capability arguments before anything runs
// (cninet.ValidateCapabilities): every name non-empty and not
// CapabilityPortMappings, every value marshals to JSON. A violation is an
// errs.InvalidAllocation error naming the capability.
func ValidateCapabilities(caps map[string]any) error {
	names := make([]string, 0, len(caps))
	for name := range caps {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		switch {
		case strings.TrimSpace(name) == "":
			return fmt.Errorf("%w: capability with an empty name, want a name such as %q", errs.InvalidAllocation, "bandwidth")
		case name == CapabilityPortMappings:
			return fmt.Errorf("%w: capability %q is given by Allocation.Ports, not Capabilities", errs.InvalidAllocation, name)
		}
		if _, err := json.Marshal(caps[name]); err != nil {
			return fmt.Errorf("%w: capability %q: value cannot be passed to a plugin as JSON: %w", errs.InvalidAllocation, name, err)
		}
	}
	return nil
}

// Declared is the capability arguments the network is given for a
// request with these port mappings and other capabilities: the port
// mappings and each capability that a plugin of the network declares;
// nil when it declares none of them.
func (info Info) Declared(mappings any, caps map[string]any) map[string]any {
	var out map[string]any
	set := func(name string, value any) {
		if out == nil {
			out = map[string]any{}
		}
		out[name] = value
	}
	if info.PortMappings {
		set(CapabilityPortMappings, mappings)
	}
	for name, value := range caps {
		if info.Capabilities[name] {
			set(name, value)
		}
	}
	return out
}
