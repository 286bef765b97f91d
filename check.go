package cninet

import (
	"context"
	"errors"
	"fmt"
	"strings"
)

// Check runs CNI CHECK on every network of an existing attachment (the
// same Allocation as Setup's, and every network added with Connect, which
// libcni's cache knows), for a runner that restarted and found a workload
// running. An unhealthy attachment is an ErrCheckFailed error
// wrapping the plugin's and naming each failing network: rebuild the
// namespace. A namespace that is gone (or no network namespace) is one,
// at once: ErrCheckFailed wrapping ErrNoNetNS. When no network failed but
// one could not be checked (disableCheck, a plugin whose CHECK is known
// to be wrong), the error is ErrCheckUnsupported.
//
// CheckOptions narrow it to one attachment, named as a CNI runtime's
// CHECK names it; an attachment libcni's cache does not know is then an
// ErrCheckFailed error (there is nothing to check it against). At most
// one CheckOptions may be given (ErrInvalidArgument).
func (c *Configurator) Check(ctx context.Context, alloc *Allocation, netns string, opts ...CheckOptions) error {
	o, err := optionsOf("Check", opts)
	if err != nil {
		return err
	}
	switch {
	case o.Network == "" && o.IfName == "":
		return c.checkAll(ctx, alloc, netns)
	case o.Network == "" || o.IfName == "":
		return fmt.Errorf("%w: CheckOptions names network %q as interface %q: give both, or neither to check every network",
			ErrInvalidArgument, o.Network, o.IfName)
	}
	return c.checkOne(ctx, alloc, o.Network, netns, o.IfName)
}

// CheckOptions name the one attachment Check checks: the workload's
// interface IfName in Network (CNI_IFNAME and the network's name, as a
// runtime's CHECK gives them). Both, or neither for every network.
type CheckOptions struct {
	Network, IfName string
}

// checkAll is Check of every network of the workload.
func (c *Configurator) checkAll(ctx context.Context, alloc *Allocation, netns string) (err error) {
	ctx, op := c.tel.startOp(ctx, opCheck, allocID(alloc), netns)
	defer func() { op.end(err) }()
	req, err := c.requestIn(alloc, netns, ErrCheckFailed) // a namespace that is gone is a verdict: rebuild it
	if err != nil {
		return err
	}
	leave, err := c.registry.enter(ctx, req.id, false)
	if err != nil {
		return err
	}
	defer leave()
	found, err := c.find.cached(alloc, req, false)
	if err != nil {
		return err
	}
	var failed, unsupported []error
	for _, fa := range c.find.attached(found) {
		switch err := c.checkNetwork(ctx, fa.req, fa.att, netns); {
		case errors.Is(err, ErrCheckFailed):
			failed = append(failed, err)
		case err != nil:
			unsupported = append(unsupported, err)
		}
	}
	if len(failed) > 0 {
		return joinErrors(failed)
	}
	return joinErrors(unsupported)
}

// checkNetwork runs CHECK on one network of the attachment.
func (c *Configurator) checkNetwork(ctx context.Context, req request, att attachment, netns string) (err error) {
	ctx, op := c.tel.startNetwork(ctx, opCheckNetwork, att.name(), att.ifName, req.id, netns)
	defer func() { op.end(err) }()
	if att.conf.info.disableCheck {
		return fmt.Errorf("%w: network %q sets disableCheck", ErrCheckUnsupported, att.name())
	}
	driver := c.driverFor(att)
	if err := driver.check(ctx, req, att, netns); err != nil {
		if why := c.plugins.knownFalseFailure(ctx, driver, att, err); why != "" {
			return fmt.Errorf("%w: allocation %s in network %q: %s: %w", ErrCheckUnsupported, req.id, att.name(), why, err)
		}
		return fmt.Errorf("%w: allocation %s in network %q: %w", ErrCheckFailed, req.id, att.name(), err)
	}
	return nil
}

// knownFalseFailure recognises CHECK failures that are plugin bugs, not
// unhealthy attachments, and says why. portmap releases that predate CNI
// spec 1.1 (Debian's v1.1.1 among them) check the DNAT chain of both IP
// families for every address, so CHECK of any attachment fails on a host
// with iptables and ip6tables; later releases check the address's family.
//
// The bridge plugin's CHECK runs the IPAM plugin whether or not its
// config names one, so on an L2-only network (no IPAM) it always fails
// with "no plugin name provided".
func (p *plugins) knownFalseFailure(ctx context.Context, driver netDriver, att attachment, err error) string {
	msg := err.Error()
	if att.conf.info.noIPAM && strings.Contains(msg, "no plugin name provided") {
		return "the network names no IPAM plugin (L2 only), and a plugin's CHECK ran one all the same"
	}
	if !driver.runsPlugins() || !strings.Contains(msg, "could not check ipv") || !strings.Contains(msg, "dnat") {
		return ""
	}
	if p.versions.supports(ctx, p.lib, "portmap", "1.1.0") {
		return ""
	}
	return "this portmap release (before CNI spec 1.1) checks both IP families' DNAT chains for every address, so its CHECK fails on healthy attachments"
}

// checkOne is Check of the attachment of ifName in network
// (CheckOptions).
func (c *Configurator) checkOne(ctx context.Context, alloc *Allocation, network, netns, ifName string) (err error) {
	ctx, op := c.tel.startOp(ctx, opCheck, allocID(alloc), netns)
	defer func() { op.end(err) }()
	req, err := c.namedRequest(alloc, network, netns, ifName, ErrCheckFailed)
	if err != nil {
		return err
	}
	leave, err := c.registry.enter(ctx, req.id, false)
	if err != nil {
		return err
	}
	defer leave()
	conf, err := c.nets.known(network, false)
	if err != nil {
		return fmt.Errorf("%w (checking allocation %s)", err, req.id)
	}
	a := c.find.cachedAt(req.id, network, ifName)
	if a == nil {
		return fmt.Errorf("%w: allocation %s is not attached to network %q as %s (libcni's cache in %s has no such attachment)",
			ErrCheckFailed, req.id, network, ifName, c.cacheDir)
	}
	return c.checkNetwork(ctx, cachedCapabilities(cachedRequest(req, a), a), attachment{conf: conf, ifName: ifName}, netns)
}
