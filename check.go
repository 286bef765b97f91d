package cninet

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
)

// Check runs CNI CHECK on an existing attachment, for a runner that
// restarted and found a workload running. An unhealthy attachment is an
// ErrCheckFailed error wrapping the plugin's: rebuild the namespace.
func (c *Configurator) Check(ctx context.Context, alloc *Allocation, netns string) error {
	att, err := newAttachment(alloc, c.ignoreHostIP)
	if err != nil {
		return err
	}
	if netns == "" {
		return fmt.Errorf("%w: empty path for allocation %s", ErrInvalidNetNS, att.id)
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

// pluginVersions caches the CNI spec versions each plugin binary supports.
type pluginVersions struct {
	mu    sync.Mutex
	known map[string][]string
}

func (p *pluginVersions) supports(ctx context.Context, c *Configurator, plugin, spec string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	versions, ok := p.known[plugin]
	if !ok {
		info, err := c.libcni().GetVersionInfo(ctx, plugin)
		if err != nil {
			return true // unknown: do not excuse the failure
		}
		versions = info.SupportedVersions()
		if p.known == nil {
			p.known = map[string][]string{}
		}
		p.known[plugin] = versions
	}
	return slices.Contains(versions, spec)
}
