package cninet

import (
	"context"
	"fmt"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
)

// ConnectOptions say how ConnectWith, DisconnectWith and CheckWith find
// one network's attachment.
type ConnectOptions struct {
	// IfName is the workload's interface in the network, as a CNI runtime
	// names it (CNI_IFNAME): at most 15 bytes, no '/', ':' or white space,
	// not "." or "..". The runtime then owns the naming: only libcni's
	// cache, not Allocation.NetworkNames, says which interfaces the
	// workload's other networks use. "": as Connect, Disconnect and Check.
	IfName string
}

// ConnectWith is Connect with the interface named by opts.IfName, for a
// runtime that names its workloads' interfaces (a CNI plugin serving
// runtimes does: see cninet daemon). The network must not be attached to
// the workload yet, and no other network may hold opts.IfName, per
// libcni's cache: either is an ErrAlreadyAttached error naming both.
// Everything else is as Connect: retries, all or nothing, the status of
// the new network.
func (c *Configurator) ConnectWith(ctx context.Context, alloc *Allocation, network, netns string, opts ConnectOptions) (_ *NetworkStatus, err error) {
	if opts.IfName == "" {
		return c.Connect(ctx, alloc, network, netns)
	}
	ctx, op := c.tel.startOp(ctx, opConnect, allocID(alloc), netns)
	defer func() { op.end(err) }()
	req, err := c.namedRequest(alloc, network, netns, opts.IfName, ErrInvalidArgument)
	if err != nil {
		return nil, err
	}
	defer c.adm.Enter(req.id)()
	conf, err := c.knownConf(network, false)
	if err != nil {
		return nil, fmt.Errorf("%w (connecting allocation %s)", err, req.id)
	}
	cached, err := c.lib.GetCachedAttachments(req.id)
	if err != nil {
		return nil, fmt.Errorf("%w: reading libcni's cache in %s: %w", ErrIO, c.cacheDir, err)
	}
	for _, a := range cached {
		if a.Network == network || a.IfName == opts.IfName {
			return nil, fmt.Errorf("%w: allocation %s is attached to network %q as %s (asked: network %q as %s)",
				ErrAlreadyAttached, req.id, a.Network, a.IfName, network, opts.IfName)
		}
	}
	att := attachment{conf: conf, ifName: opts.IfName}
	if err := c.preflight(att); err != nil {
		return nil, err
	}
	defer c.keepLoopback(req.id, netns, []foundAttachment{{att: att}})()
	// The runtime may attach the same container to networks this
	// Configurator never sees: always as if others were there.
	return c.attachAll(ctx, req, netns, []attachment{att}, true)
}

// DisconnectWith is Disconnect of the attachment whose interface is
// opts.IfName: DEL and force cleanup of that network's attachment, with
// the port mappings, args and capabilities libcni cached for it (else
// alloc's). Unlike Disconnect it runs even when libcni's cache does not
// know the attachment — an ADD cut short caches nothing yet may have
// reserved an address — so it is the right verb for a runtime's DEL, and
// as idempotent as Teardown. netns may be empty or already deleted. Its
// DEL never reaches another attachment of the same container, one this
// Configurator cannot see included (see Disconnect).
func (c *Configurator) DisconnectWith(ctx context.Context, alloc *Allocation, network, netns string, opts ConnectOptions) (err error) {
	if opts.IfName == "" {
		return c.Disconnect(ctx, alloc, network, netns)
	}
	ctx, op := c.tel.startOp(ctx, opDisconnect, allocID(alloc), netns)
	defer func() { op.end(err) }()
	req, err := c.namedRequest(alloc, network, "", opts.IfName, nil)
	if err != nil {
		return err
	}
	defer c.adm.Enter(req.id)()
	conf, err := c.knownConf(network, true)
	if err != nil {
		return fmt.Errorf("%w (disconnecting allocation %s)", err, req.id)
	}
	fa := foundAttachment{att: attachment{conf: conf, ifName: opts.IfName}, req: req}
	if a := c.cachedAt(req.id, network, opts.IfName); a != nil {
		fa.req, fa.cached = cachedCapabilities(cachedRequest(req, a), a), true
	}
	defer c.keepLoopback(req.id, netns, []foundAttachment{fa})()
	return c.detachAll(ctx, netns, []foundAttachment{fa}, true) // as in ConnectWith: others may be there unseen
}

// CheckWith is Check of one network's attachment, the one whose interface
// is opts.IfName. An attachment libcni's cache does not know is an
// ErrCheckFailed error: there is nothing to check it against.
func (c *Configurator) CheckWith(ctx context.Context, alloc *Allocation, network, netns string, opts ConnectOptions) (err error) {
	if opts.IfName == "" {
		return c.Check(ctx, alloc, netns)
	}
	ctx, op := c.tel.startOp(ctx, opCheck, allocID(alloc), netns)
	defer func() { op.end(err) }()
	req, err := c.namedRequest(alloc, network, netns, opts.IfName, ErrCheckFailed)
	if err != nil {
		return err
	}
	defer c.adm.Enter(req.id)()
	conf, err := c.knownConf(network, false)
	if err != nil {
		return fmt.Errorf("%w (checking allocation %s)", err, req.id)
	}
	a := c.cachedAt(req.id, network, opts.IfName)
	if a == nil {
		return fmt.Errorf("%w: allocation %s is not attached to network %q as %s (libcni's cache in %s has no such attachment)",
			ErrCheckFailed, req.id, network, opts.IfName, c.cacheDir)
	}
	return c.checkNetwork(ctx, cachedCapabilities(cachedRequest(req, a), a), attachment{conf: conf, ifName: opts.IfName}, netns)
}

// CachedResult returns the CNI result libcni cached when allocation id was
// attached to network as ifName (by Setup, Connect or ConnectWith), in the
// network's CNI version: every interface, address, route and DNS setting
// the plugins reported. It is nil, with a nil error, when the cache holds
// none. A network this Configurator does not know is ErrNetworkNotFound.
func (c *Configurator) CachedResult(id, network, ifName string) (types.Result, error) {
	conf, err := c.knownConf(network, true)
	if err != nil {
		return nil, err
	}
	res, err := c.lib.GetNetworkListCachedResult(conf.list, &libcni.RuntimeConf{ContainerID: id, IfName: ifName})
	if err != nil {
		return nil, fmt.Errorf("%w: cached result of allocation %s in network %q as %s: %w", ErrIO, id, network, ifName, err)
	}
	return res, nil
}

// StatusOf is Status for one network: its conflist, its plugins, their
// nftables backends and the CNI STATUS verb. A network this Configurator
// does not know is ErrNetworkNotFound; one that is not ready ErrNotReady
// (with ErrPluginMissing when a plugin is absent).
func (c *Configurator) StatusOf(ctx context.Context, network string) (err error) {
	ctx, op := c.tel.startOp(ctx, opStatus, "", "")
	defer func() { op.end(err) }()
	conf, err := c.knownConf(network, false)
	if err != nil {
		return err
	}
	err = c.networkReady(ctx, conf, false)
	c.tel.noteReady(network, err)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	return nil
}

// namedRequest validates what the *With verbs are given; with a
// noNetNS class (ErrInvalidArgument to attach, ErrCheckFailed to check)
// netns must be a network namespace too, since plugins will run in it.
func (c *Configurator) namedRequest(alloc *Allocation, network, netns, ifName string, noNetNS error) (request, error) {
	if err := checkNetworkName(network); err != nil {
		return request{}, err
	}
	if err := CheckIfName(ifName); err != nil {
		return request{}, fmt.Errorf("%w (allocation %s)", err, allocID(alloc))
	}
	if noNetNS == nil {
		return newRequest(alloc, c.ignoreHostIP)
	}
	return c.requestAt(alloc, netns, noNetNS, c.driver.runsPlugins())
}

// cachedAt returns libcni's cached attachment of id in network as ifName,
// or nil.
func (c *Configurator) cachedAt(id, network, ifName string) *libcni.NetworkAttachment {
	cached, err := c.lib.GetCachedAttachments(id)
	if err != nil {
		c.logger.Warn("reading libcni's cache failed", "alloc_id", id, "cache_dir", c.cacheDir, "error", err)
		return nil
	}
	for _, a := range cached {
		if a.Network == network && a.IfName == ifName {
			return a
		}
	}
	return nil
}

// cachedCapabilities is att with the capability arguments besides port
// mappings that libcni cached for a, where it cached any: a DEL and a
// CHECK must tell the plugins what the ADD told them.
func cachedCapabilities(req request, a *libcni.NetworkAttachment) request {
	caps := map[string]any{}
	for name, value := range a.CapabilityArgs {
		if name != capabilityPortMappings {
			caps[name] = value
		}
	}
	if len(caps) > 0 {
		req.caps = caps
	}
	return req
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
		return fmt.Errorf("%w: interface name %q, want a name other than . and ..", ErrInvalidArgument, name)
	case strings.ContainsAny(name, "/: \t\n\v\f\r"):
		return fmt.Errorf("%w: interface name %q contains '/', ':' or white space", ErrInvalidArgument, name)
	}
	return nil
}
