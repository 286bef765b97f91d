package cninet

import (
	"fmt"
	"sort"
	"strings"

	"github.com/seed1280861d/cninet/internal/attachments"
	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/workload"
)

// ignoreUnknownArg tells plugins to accept args they do not know, so that
// identity args meant for one plugin (or for none) do not fail the others.
const ignoreUnknownArg = "IgnoreUnknown"

func newRequest(alloc *Allocation, ignoreHostIP bool) (attachments.Request, error) {
	if err := validateAllocation(alloc); err != nil {
		return attachments.Request{}, err
	}
	mappings, err := PortMappings(alloc, ignoreHostIP)
	if err != nil {
		return attachments.Request{}, err
	}
	args, err := cniArgs(alloc)
	if err != nil {
		return attachments.Request{}, err
	}
	if err := ValidateCapabilities(alloc.Capabilities); err != nil {
		return attachments.Request{}, fmt.Errorf("allocation %s: %w", alloc.ID, err)
	}
	return attachments.Request{ID: alloc.ID, Mappings: mappings, Args: args, Caps: alloc.Capabilities, Networks: alloc.NetworkNames}, nil
}

// requests builds the requests of a Configurator's calls, by its Config
// (IgnorePortMappingHostIP) and whether cninet runs the plugins itself.
type requests struct {
	ignoreHostIP bool
	// findPlugins: cninet runs the default network's plugins itself
	// (attachments.Drivers.FindPlugins); libRuns: it runs a named network's (the
	// libcni driver's RunsPlugins).
	findPlugins bool
	libRuns     func() bool
}

// requestIn validates alloc and the namespace path a call that runs
// plugins in it needs: a path that is no network namespace is an error of
// class noNetNS — ErrInvalidArgument to attach (Setup, Connect),
// ErrCheckFailed to check (a namespace that is gone is a verdict on the
// attachment: rebuild it).
func (r requests) requestIn(alloc *Allocation, netns string, noNetNS error) (attachments.Request, error) {
	return requestAt(alloc, netns, r.ignoreHostIP, noNetNS, r.findPlugins)
}

// requestAt validates alloc and netns. Where cninet runs the plugins
// itself (runs; an injected Config.CNI, a fake in tests, decides for
// itself what a namespace path is), a netns that is no network namespace
// is an ErrNoNetNS error of class noNetNS.
func requestAt(alloc *Allocation, netns string, ignoreHostIP bool, noNetNS error, runs bool) (attachments.Request, error) {
	req, err := newRequest(alloc, ignoreHostIP)
	if err != nil {
		return req, err
	}
	if netns == "" {
		return req, fmt.Errorf("%w: empty network namespace path for allocation %s", ErrInvalidArgument, req.ID)
	}
	if runs {
		if err := workload.CheckNetNS(netns); err != nil {
			return req, fmt.Errorf("%w: allocation %s: %w: %w", noNetNS, req.ID, ErrNoNetNS, err)
		}
	}
	return req, nil
}

// namedRequest validates what the *With verbs are given; with a
// noNetNS class (ErrInvalidArgument to attach, ErrCheckFailed to check)
// netns must be a network namespace too, since plugins will run in it.
func (r requests) namedRequest(alloc *Allocation, network, netns, ifName string, noNetNS error) (attachments.Request, error) {
	if err := catalog.CheckName(network); err != nil {
		return attachments.Request{}, err
	}
	if err := CheckIfName(ifName); err != nil {
		return attachments.Request{}, fmt.Errorf("%w (allocation %s)", err, allocID(alloc))
	}
	if noNetNS == nil {
		return newRequest(alloc, r.ignoreHostIP)
	}
	return requestAt(alloc, netns, r.ignoreHostIP, noNetNS, r.libRuns())
}

// cniArgs returns the CNI args for an allocation: IgnoreUnknown=1 first
// (unless alloc.ExactArgs), then alloc.Args sorted by key, so that Setup,
// Check and Teardown of the same allocation always send the same args.
func cniArgs(alloc *Allocation) ([][2]string, error) {
	keys := make([]string, 0, len(alloc.Args))
	for k, v := range alloc.Args {
		if err := validateArg(k, v, alloc.ExactArgs); err != nil {
			return nil, err
		}
		keys = append(keys, k)
	}
	sort.Strings(keys)
	args := make([][2]string, 0, 1+len(keys))
	if !alloc.ExactArgs {
		args = append(args, [2]string{ignoreUnknownArg, "1"})
	}
	for _, k := range keys {
		args = append(args, [2]string{k, alloc.Args[k]})
	}
	return args, nil
}

// validateArg enforces what CNI_ARGS can carry: it is a ';'-separated list
// of key=value pairs, each split at its first '=', so a ';' anywhere or
// a '=' in a key would silently become a different arg. IgnoreUnknown is
// cninet's own unless exact (Allocation.ExactArgs).
func validateArg(k, v string, exact bool) error {
	switch {
	case k == "":
		return fmt.Errorf("%w: CNI arg with an empty key (value %q)", ErrInvalidAllocation, v)
	case !exact && strings.EqualFold(k, ignoreUnknownArg):
		return fmt.Errorf("%w: CNI arg %q is reserved: cninet always sends IgnoreUnknown=1 (unless Allocation.ExactArgs)", ErrInvalidAllocation, k)
	case strings.ContainsAny(k, ";="):
		return fmt.Errorf("%w: CNI arg key %q contains ';' or '=', which CNI_ARGS cannot carry in a key", ErrInvalidAllocation, k)
	case strings.Contains(v, ";"):
		return fmt.Errorf("%w: CNI arg %q has value %q containing ';', which CNI_ARGS cannot carry", ErrInvalidAllocation, k, v)
	}
	return nil
}

// optionsOf returns the one options value of an operation that takes
// them as an optional last argument (its zero value when none is given).
func optionsOf[T any](operation string, opts []T) (T, error) {
	var zero T
	switch len(opts) {
	case 0:
		return zero, nil
	case 1:
		return opts[0], nil
	}
	return zero, fmt.Errorf("%w: %s takes at most one %T, got %d", ErrInvalidArgument, operation, zero, len(opts))
}

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

// ValidateCapabilities checks capability arguments as Setup, Connect,
// Check and Teardown do before anything runs: every name is non-empty and
// not "portMappings" (port mappings come from Allocation.Ports, whose
// validation they need), and every value marshals to JSON, since that is
// how the plugins receive it. A violation is an ErrInvalidAllocation
// error naming the capability. A nil or empty map is valid.
func ValidateCapabilities(caps map[string]any) error {
	return catalog.ValidateCapabilities(caps)
}

// CheckIfName reports whether name can be a workload's interface name
// (Linux's rules, as the CNI spec's CNI_IFNAME): 1–15 bytes, no '/', ':'
// or white space, not "." or "..". A violation is an ErrInvalidArgument
// error naming it.
func CheckIfName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("%w: empty interface name, want e.g. eth0", ErrInvalidArgument)
	case len(name) > 15:
		return fmt.Errorf("%w: interface name %q has %d bytes, want at most 15", ErrInvalidArgument, name, len(name))
	case name == "." || name == "..":
		return fmt.Errorf("%w: interface name %q names a directory entry (. or ..), want another name", ErrInvalidArgument, name)
	case strings.ContainsAny(name, "/: \t\n\v\f\r"):
		return fmt.Errorf("%w: interface name %q contains '/', ':' or white space", ErrInvalidArgument, name)
	}
	return nil
}
