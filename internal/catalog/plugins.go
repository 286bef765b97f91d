package catalog

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/seed1280861d/cninet/internal/errs"
	"github.com/seed1280861d/cninet/internal/iptables"
	"github.com/seed1280861d/cninet/internal/nftables"
)

// Plugins is what a Configurator knows of the plugin binaries and of the
// host they run on: whether a conflist's plugins are there, the CNI spec
// versions each supports, and the firewall backend each really uses here
// (backends.go).
type Plugins struct {
	dirs      []string
	lib       *libcni.CNIConfig // asks a plugin its versions
	iptOpener *iptables.Opener
	nftOpener *nftables.Opener
	versions  pluginVersions
	firewall  hostFirewall

	mu    sync.Mutex
	found map[string]pluginsFound // by network: the last conflist whose plugins were all found
}

// NewPlugins is the plugins in dirs, asked their versions through lib,
// on the host that ipt and nft open (the Configurator's seams: the same
// binaries on the same PATH as the plugins', or a test's fakes).
func NewPlugins(dirs []string, lib *libcni.CNIConfig, ipt *iptables.Opener, nft *nftables.Opener) *Plugins {
	return &Plugins{dirs: dirs, lib: lib, iptOpener: ipt, nftOpener: nft}
}

// pluginsFound is a conflist whose plugins were all found, and when.
type pluginsFound struct {
	list  *libcni.NetworkConfigList
	stamp []time.Time
}

// Check fails when a plugin binary of conf is missing: a chain that
// fails halfway through leaves a veth until the namespace goes, and a DEL
// cannot run a plugin that is not there either. The answer is kept until
// the conflist or a plugin directory changes.
func (p *Plugins) Check(conf Conf) error {
	stamp := p.dirsStamp()
	p.mu.Lock()
	defer p.mu.Unlock()
	if ok := p.found[conf.Info.Name]; ok.list == conf.List && slices.Equal(ok.stamp, stamp) {
		return nil
	}
	if err := p.Missing(conf); err != nil {
		return err
	}
	if p.found == nil {
		p.found = map[string]pluginsFound{}
	}
	p.found[conf.Info.Name] = pluginsFound{conf.List, stamp}
	return nil
}

// dirsStamp is the modification times of the plugin directories: a
// binary added, removed or renamed changes its directory's.
func (p *Plugins) dirsStamp() []time.Time {
	stamp := make([]time.Time, len(p.dirs))
	for i, dir := range p.dirs {
		if fi, err := os.Stat(dir); err == nil {
			stamp[i] = fi.ModTime()
		}
	}
	return stamp
}

// Missing reports the plugins of conf missing from the plugin dirs
// (errs.PluginMissing), asking the file system every time.
func (p *Plugins) Missing(conf Conf) error {
	var missing []string
	for _, t := range conf.Info.PluginTypes {
		if _, err := invoke.FindInPath(t, p.dirs); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s not found in %s (network %q)", errs.PluginMissing,
			strings.Join(missing, ", "), strings.Join(p.dirs, ":"), conf.Info.Name)
	}
	return nil
}

// Supports reports whether plugin supports CNI spec version spec; a
// plugin that cannot be asked counts as supporting it.
func (p *Plugins) Supports(ctx context.Context, plugin, spec string) bool {
	versions := p.versions.of(ctx, p.lib, plugin)
	return versions == nil || slices.Contains(versions, spec)
}

// pluginVersions caches the CNI spec versions each plugin binary supports,
// for as long as the Configurator lives: a plugin is executed at most once
// per name, outside the lock, so concurrent callers never wait on a plugin
// that another caller is asking about something else.
type pluginVersions struct {
	mu    sync.Mutex
	known map[string][]string
}

// of returns the spec versions plugin supports, oldest first; nil when it
// cannot be asked.
func (p *pluginVersions) of(ctx context.Context, lib *libcni.CNIConfig, plugin string) []string {
	p.mu.Lock()
	versions, ok := p.known[plugin]
	p.mu.Unlock()
	if ok {
		return versions
	}
	info, err := lib.GetVersionInfo(ctx, plugin)
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
