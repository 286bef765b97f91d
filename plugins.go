package cninet

import (
	"context"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
)

// Backends the plugins can masquerade and map ports with. The bridge and
// ptp plugins choose with "ipMasqBackend", portmap with "backend"; the
// firewall plugin has no nftables backend.
const (
	BackendIPTables = "iptables"
	BackendNFTables = "nftables"
)

// firstNFTablesRelease is the first release of the reference plugins with
// nftables backends for masquerading and port mapping.
const firstNFTablesRelease = "v1.6.1"

// nftablesRequest is one plugin of a conflist that asks for an nftables
// backend.
type nftablesRequest struct {
	plugin, field string
}

// nftablesRequests lists the plugins of list that ask for nftables.
func nftablesRequests(list *libcni.NetworkConfigList) []nftablesRequest {
	var reqs []nftablesRequest
	for _, p := range list.Plugins {
		var conf struct {
			IPMasqBackend string `json:"ipMasqBackend"`
			Backend       string `json:"backend"`
		}
		if json.Unmarshal(p.Bytes, &conf) != nil {
			continue
		}
		if conf.IPMasqBackend == BackendNFTables {
			reqs = append(reqs, nftablesRequest{p.Network.Type, "ipMasqBackend"})
		}
		if conf.Backend == BackendNFTables {
			reqs = append(reqs, nftablesRequest{p.Network.Type, "backend"})
		}
	}
	return reqs
}

// checkBackends fails when the conflist asks a plugin for an nftables
// backend that the installed binary cannot provide. An older plugin
// ignores the field and silently uses iptables, so Setup would work, just
// not as configured: Status is where that is said.
func (c *Configurator) checkBackends(ctx context.Context, list *libcni.NetworkConfigList) error {
	var refused []string
	for _, req := range nftablesRequests(list) {
		if why := c.lacksNFTables(ctx, req.plugin); why != "" {
			refused = append(refused, fmt.Sprintf("plugin %s cannot provide %s %q: %s", req.plugin, req.field, BackendNFTables, why))
		}
	}
	if len(refused) > 0 {
		return fmt.Errorf("%w: network %q: %s", ErrInvalidConfig, list.Name, strings.Join(refused, "; "))
	}
	return nil
}

// lacksNFTables says why a plugin binary has no nftables backend, or ""
// when it has one or that cannot be ruled out. A binary built by `go
// install` records its release; otherwise the CNI spec versions it
// supports tell: every release with nftables backends supports spec 1.1.0.
func (c *Configurator) lacksNFTables(ctx context.Context, plugin string) string {
	if plugin == "firewall" {
		return "the firewall plugin has no nftables backend (use iptables or firewalld)"
	}
	path, err := invoke.FindInPath(plugin, c.pluginDirs)
	if err != nil {
		return "" // missing plugins are reported on their own
	}
	if info, err := buildinfo.ReadFile(path); err == nil && isRelease(info.Main.Version) {
		if releaseBefore(info.Main.Version, firstNFTablesRelease) {
			return fmt.Sprintf("%s is release %s; nftables backends need %s or later", path, info.Main.Version, firstNFTablesRelease)
		}
		return ""
	}
	if versions := c.versions.of(ctx, c, plugin); versions != nil && !slices.Contains(versions, "1.1.0") {
		return fmt.Sprintf("%s supports CNI spec versions up to %s, so it predates the nftables backends (%s)",
			path, versions[len(versions)-1], firstNFTablesRelease)
	}
	return ""
}

// isRelease reports a module version of the form vX.Y.Z.
func isRelease(v string) bool { _, ok := releaseNumbers(v); return ok }

// releaseBefore reports whether release a is older than release b.
func releaseBefore(a, b string) bool {
	na, _ := releaseNumbers(a)
	nb, _ := releaseNumbers(b)
	return slices.Compare(na, nb) < 0
}

func releaseNumbers(v string) ([]int, bool) {
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if !strings.HasPrefix(v, "v") || len(parts) != 3 {
		return nil, false
	}
	nums := make([]int, 3)
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, false
		}
		nums[i] = n
	}
	return nums, true
}

// preflight fails Setup before anything runs when a plugin of n that
// cninet would run is missing.
func (c *Configurator) preflight(att attachment) error {
	if !c.driverFor(att).runsPlugins() {
		return nil // an injected cni.CNI finds its plugins itself
	}
	return c.checkPlugins(att.conf)
}

// pluginsFound is a conflist whose plugins were all found, and when.
type pluginsFound struct {
	list  *libcni.NetworkConfigList
	stamp []time.Time
}

// checkPlugins fails when a plugin binary of conf is missing: a chain that
// fails halfway through leaves a veth until the namespace goes, and a DEL
// cannot run a plugin that is not there either. The answer is kept until
// the conflist or a plugin directory changes.
func (c *Configurator) checkPlugins(conf networkConf) error {
	stamp := c.pluginDirsStamp()
	c.pluginsMu.Lock()
	defer c.pluginsMu.Unlock()
	if ok := c.pluginsOKByName[conf.info.name]; ok.list == conf.list && slices.Equal(ok.stamp, stamp) {
		return nil
	}
	if err := c.checkPluginsIn(conf); err != nil {
		return err
	}
	if c.pluginsOKByName == nil {
		c.pluginsOKByName = map[string]pluginsFound{}
	}
	c.pluginsOKByName[conf.info.name] = pluginsFound{conf.list, stamp}
	c.pluginsOK.list, c.pluginsOK.stamp = conf.list, stamp
	return nil
}

// pluginDirsStamp is the modification times of the plugin directories: a
// binary added, removed or renamed changes its directory's.
func (c *Configurator) pluginDirsStamp() []time.Time {
	stamp := make([]time.Time, len(c.pluginDirs))
	for i, dir := range c.pluginDirs {
		if fi, err := os.Stat(dir); err == nil {
			stamp[i] = fi.ModTime()
		}
	}
	return stamp
}

// checkPluginsIn reports the plugins of conf missing from the plugin dirs.
func (c *Configurator) checkPluginsIn(conf networkConf) error {
	var missing []string
	for _, t := range conf.info.pluginTypes {
		if _, err := invoke.FindInPath(t, c.pluginDirs); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s not found in %s (network %q)", ErrPluginMissing,
			strings.Join(missing, ", "), strings.Join(c.pluginDirs, ":"), conf.info.name)
	}
	return nil
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
