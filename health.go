package cninet

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Status reports whether this Configurator can attach workloads now: the
// conflist is loaded, every plugin it names is in the plugin dirs and
// supports its cniVersion, a plugin asked for an nftables backend has one
// (ErrInvalidConfig naming the plugin otherwise), and the CNI 1.1 STATUS
// verb (for conflists of that version) passes. The error (ErrNotReady, plus ErrPluginMissing when
// a plugin is absent) names what is wrong. Suitable for a node fingerprint.
func (c *Configurator) Status(ctx context.Context) error {
	conf, err := c.current()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	if err := c.checkPluginsIn(conf); err != nil {
		return fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	if err := c.checkBackends(ctx, conf.list); err != nil {
		return fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	if _, err := c.lib.ValidateNetworkList(ctx, conf.list); err != nil {
		return fmt.Errorf("%w: network %q: %w", ErrNotReady, conf.info.name, err)
	}
	if err := c.cni.Status(); err != nil {
		return fmt.Errorf("%w: CNI STATUS: %w", ErrNotReady, err)
	}
	return nil
}

// Check runs CNI CHECK on an existing attachment, for a runner that
// restarted and found a workload running. An unhealthy attachment is an
// ErrCheckFailed error wrapping the plugin's: rebuild the namespace.
func (c *Configurator) Check(ctx context.Context, alloc *Allocation, netns string) error {
	att, err := newAttachment(alloc, c.ignoreHostIP)
	if err != nil {
		return err
	}
	if netns == "" {
		return fmt.Errorf("%w: empty network namespace path for allocation %s", ErrInvalidArgument, att.id)
	}
	defer c.enter(att.id)()
	conf, err := c.current()
	if err != nil {
		return err
	}
	if conf.info.disableCheck {
		return fmt.Errorf("%w: network %q sets disableCheck", ErrCheckUnsupported, conf.info.name)
	}
	if err := c.cni.Check(ctx, att.id, netns, att.opts()...); err != nil {
		if why := c.knownFalseFailure(ctx, err); why != "" {
			return fmt.Errorf("%w: allocation %s: %s: %w", ErrCheckUnsupported, att.id, why, err)
		}
		return fmt.Errorf("%w: allocation %s: %w", ErrCheckFailed, att.id, err)
	}
	return nil
}

// knownFalseFailure recognises CHECK failures that are plugin bugs, not
// unhealthy attachments, and says why. portmap releases that predate CNI
// spec 1.1 (Debian's v1.1.1 among them) check the DNAT chain of both IP
// families for every address, so CHECK of any attachment fails on a host
// with iptables and ip6tables; later releases check the address's family.
func (c *Configurator) knownFalseFailure(ctx context.Context, err error) string {
	msg := err.Error()
	if !c.findPlugins || !strings.Contains(msg, "could not check ipv") || !strings.Contains(msg, "dnat") {
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
