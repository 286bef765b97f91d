package cninet

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Status reports whether this Configurator can attach workloads now, in
// every network it knows: the conflists are loaded, every plugin they name
// is in the plugin dirs and supports the conflist's cniVersion, a plugin
// asked for an nftables backend has one (ErrInvalidConfig naming the
// plugin otherwise), and the CNI 1.1 STATUS verb (for conflists of that
// version) passes. The error (ErrNotReady, plus ErrPluginMissing when a
// plugin is absent) names each network that is not ready and what is
// wrong with it. Suitable for a node fingerprint.
func (c *Configurator) Status(ctx context.Context) (err error) {
	ctx, op := c.tel.startOp(ctx, opStatus, "", "")
	defer func() { op.end(err) }()
	def, err := c.current()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	var errs []error
	for _, conf := range c.knownNetworks() {
		err := c.networkReady(ctx, conf, conf.info.name == def.info.name)
		c.tel.noteReady(conf.info.name, err)
		if err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrNotReady, joinErrors(errs))
	}
	return nil
}

// networkReady is Status for one network. The default network's STATUS
// goes through Config.CNI, like its other verbs.
func (c *Configurator) networkReady(ctx context.Context, conf network, isDefault bool) (err error) {
	ctx, op := c.tel.startNetwork(ctx, opStatusNetwork, conf.info.name, "", "", "")
	defer func() { op.end(err) }()
	if err := c.checkPluginsIn(conf); err != nil {
		return err
	}
	if err := c.checkBackends(ctx, conf.list); err != nil {
		return err
	}
	if _, err := c.lib.ValidateNetworkList(ctx, conf.list); err != nil {
		return fmt.Errorf("network %q: %w", conf.info.name, err)
	}
	if isDefault {
		if err := c.cni.Status(); err != nil {
			return fmt.Errorf("network %q: CNI STATUS: %w", conf.info.name, err)
		}
	} else if err := c.lib.GetStatusNetworkList(ctx, conf.list); err != nil {
		return fmt.Errorf("network %q: CNI STATUS: %w", conf.info.name, err)
	}
	return nil
}

// Check runs CNI CHECK on every network of an existing attachment (the
// same Allocation as Setup's, and every network added with Connect, which
// libcni's cache knows), for a runner that restarted and found a workload
// running. An unhealthy attachment is an ErrCheckFailed error
// wrapping the plugin's and naming each failing network: rebuild the
// namespace. A namespace that is gone (or no network namespace) is one,
// at once: ErrCheckFailed wrapping ErrNoNetNS. When no network failed but
// one could not be checked (disableCheck, a plugin whose CHECK is known
// to be wrong), the error is ErrCheckUnsupported.
func (c *Configurator) Check(ctx context.Context, alloc *Allocation, netns string) (err error) {
	ctx, op := c.tel.startOp(ctx, opCheck, allocID(alloc), netns)
	defer func() { op.end(err) }()
	req, err := c.requestToCheck(alloc, netns)
	if err != nil {
		return err
	}
	defer c.adm.Enter(req.id)()
	found, err := c.attachmentsOf(alloc, req, false)
	if err != nil {
		return err
	}
	var failed, unsupported []error
	for _, fa := range c.attached(found) {
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
		if why := c.knownFalseFailure(ctx, driver, err); why != "" {
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
func (c *Configurator) knownFalseFailure(ctx context.Context, driver netDriver, err error) string {
	msg := err.Error()
	if !driver.runsPlugins() || !strings.Contains(msg, "could not check ipv") || !strings.Contains(msg, "dnat") {
		return ""
	}
	if c.versions.supports(ctx, c, "portmap", "1.1.0") {
		return ""
	}
	return "this portmap release (before CNI spec 1.1) checks both IP families' DNAT chains for every address, so its CHECK fails on healthy attachments"
}

// pluginVersions caches the CNI spec versions each plugin binary supports,
// for as long as the Configurator lives: a plugin is executed at most once
// per name, outside the lock, so concurrent callers never wait on a plugin
// that another caller is asking about something else.
type pluginVersions struct {
	mu    sync.Mutex
	known map[string][]string
}

// supports reports whether plugin supports CNI spec version spec; a
// plugin that cannot be asked counts as supporting it.
func (p *pluginVersions) supports(ctx context.Context, c *Configurator, plugin, spec string) bool {
	versions := p.of(ctx, c, plugin)
	return versions == nil || slices.Contains(versions, spec)
}

// of returns the spec versions plugin supports, oldest first; nil when it
// cannot be asked.
func (p *pluginVersions) of(ctx context.Context, c *Configurator, plugin string) []string {
	p.mu.Lock()
	versions, ok := p.known[plugin]
	p.mu.Unlock()
	if ok {
		return versions
	}
	info, err := c.lib.GetVersionInfo(ctx, plugin)
	if err != nil {
		return nil
	}
	versions = info.SupportedVersions()
	p.mu.Lock()
	if p.known == nil {
		p.known = map[string][]string{}
	}
	p.known[plugin] = versions
	p.mu.Unlock()
	return versions
}
