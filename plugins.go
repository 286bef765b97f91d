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
	"github.com/seed1280861d/cninet/internal/iptables"
	"github.com/seed1280861d/cninet/internal/nftables"
	"github.com/seed1280861d/cninet/internal/registry"
)

// plugins is what a Configurator knows of the plugin binaries and of the
// host they run on: whether a conflist's plugins are there, the CNI spec
// versions each supports, and the firewall backend each really uses here.
type plugins struct {
	dirs      []string
	lib       *libcni.CNIConfig // asks a plugin its versions
	iptOpener *iptables.Opener
	nftOpener *nftables.Opener
	versions  pluginVersions
	firewall  hostFirewall

	mu    sync.Mutex
	found map[string]pluginsFound // by network: the last conflist whose plugins were all found
}

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
func (p *plugins) checkBackends(ctx context.Context, list *libcni.NetworkConfigList) error {
	var refused []string
	for _, req := range nftablesRequests(list) {
		if why := p.lacksNFTables(ctx, req.plugin); why != "" {
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
func (p *plugins) lacksNFTables(ctx context.Context, plugin string) string {
	if plugin == "firewall" {
		return "the firewall plugin has no nftables backend (use iptables or firewalld)"
	}
	path, err := invoke.FindInPath(plugin, p.dirs)
	if err != nil {
		return "" // missing plugins are reported on their own
	}
	if info, err := buildinfo.ReadFile(path); err == nil && isRelease(info.Main.Version) {
		if releaseBefore(info.Main.Version, firstNFTablesRelease) {
			return fmt.Sprintf("%s is release %s; nftables backends need %s or later", path, info.Main.Version, firstNFTablesRelease)
		}
		return ""
	}
	if versions := p.versions.of(ctx, p.lib, plugin); versions != nil && !slices.Contains(versions, "1.1.0") {
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

// pluginsFound is a conflist whose plugins were all found, and when.
type pluginsFound struct {
	list  *libcni.NetworkConfigList
	stamp []time.Time
}

// check fails when a plugin binary of conf is missing: a chain that
// fails halfway through leaves a veth until the namespace goes, and a DEL
// cannot run a plugin that is not there either. The answer is kept until
// the conflist or a plugin directory changes.
func (p *plugins) check(conf networkConf) error {
	stamp := p.dirsStamp()
	p.mu.Lock()
	defer p.mu.Unlock()
	if ok := p.found[conf.info.name]; ok.list == conf.list && slices.Equal(ok.stamp, stamp) {
		return nil
	}
	if err := p.missing(conf); err != nil {
		return err
	}
	if p.found == nil {
		p.found = map[string]pluginsFound{}
	}
	p.found[conf.info.name] = pluginsFound{conf.list, stamp}
	return nil
}

// dirsStamp is the modification times of the plugin directories: a
// binary added, removed or renamed changes its directory's.
func (p *plugins) dirsStamp() []time.Time {
	stamp := make([]time.Time, len(p.dirs))
	for i, dir := range p.dirs {
		if fi, err := os.Stat(dir); err == nil {
			stamp[i] = fi.ModTime()
		}
	}
	return stamp
}

// missing reports the plugins of conf missing from the plugin dirs.
func (p *plugins) missing(conf networkConf) error {
	var missing []string
	for _, t := range conf.info.pluginTypes {
		if _, err := invoke.FindInPath(t, p.dirs); err != nil {
			missing = append(missing, t)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w: %s not found in %s (network %q)", ErrPluginMissing,
			strings.Join(missing, ", "), strings.Join(p.dirs, ":"), conf.info.name)
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
func (p *pluginVersions) supports(ctx context.Context, lib *libcni.CNIConfig, plugin, spec string) bool {
	versions := p.of(ctx, lib, plugin)
	return versions == nil || slices.Contains(versions, spec)
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

// Which firewall backend each plugin really uses on this host. A plugin
// told "backend" (portmap) or "ipMasqBackend" (bridge, ptp) uses that;
// portmap's conditions imply one; otherwise an upstream plugin with
// nftables backends picks nftables by itself where iptables cannot run
// and nft can, and iptables everywhere else. The firewall plugin has no
// nftables backend. What matters to cninet: a DEL of portmap's nftables
// backend deletes by the bare container id, so it must be kept from a
// workload's other networks (see detachment.one), and a cleanup needs iptables
// only where a plugin of the network uses it.

// netfilterPlugin is one plugin of a conflist that writes firewall rules,
// with the backend its conf names ("" when it names none).
type netfilterPlugin struct {
	typ, explicit string
}

// netfilterPlugins lists the plugins of list that write firewall rules:
// bridge and ptp with ipMasq, portmap, and the firewall plugin with its
// iptables backend.
func netfilterPlugins(list *libcni.NetworkConfigList) []netfilterPlugin {
	var out []netfilterPlugin
	for _, p := range list.Plugins {
		var conf struct {
			IPMasq        bool      `json:"ipMasq"`
			IPMasqBackend string    `json:"ipMasqBackend"`
			Backend       string    `json:"backend"`
			ConditionsV4  *[]string `json:"conditionsV4"`
			ConditionsV6  *[]string `json:"conditionsV6"`
		}
		if json.Unmarshal(p.Bytes, &conf) != nil {
			continue
		}
		switch typ := p.Network.Type; typ {
		case "bridge", "ptp":
			if conf.IPMasq {
				out = append(out, netfilterPlugin{typ, conf.IPMasqBackend})
			}
		case "portmap":
			backend := conf.Backend
			for _, conds := range []*[]string{conf.ConditionsV4, conf.ConditionsV6} {
				if backend == "" && conds != nil && len(*conds) > 0 && (*conds)[0] != "" {
					if c := (*conds)[0][0]; c == '-' || c == '!' {
						backend = BackendIPTables
					} else {
						backend = BackendNFTables
					}
				}
			}
			out = append(out, netfilterPlugin{typ, backend})
		case "firewall":
			if conf.Backend == "" || conf.Backend == BackendIPTables {
				out = append(out, netfilterPlugin{typ, BackendIPTables})
			}
		}
	}
	return out
}

// hostFirewall is what this host offers the plugins, probed once per
// Configurator: whether iptables can run, and whether nft can.
type hostFirewall struct {
	once               sync.Once
	iptables, nftables bool
}

// probeFirewall tells whether iptables and nftables can be used here,
// through the Configurator's own seams (the same binaries on the same
// PATH as the plugins', or the fakes of a test).
func (p *plugins) probeFirewall() (iptables, nftables bool) {
	p.firewall.once.Do(func() {
		_, err := p.iptOpener.Get(false)
		p.firewall.iptables = err == nil
		_, err = p.nftOpener.Get()
		p.firewall.nftables = err == nil
	})
	return p.firewall.iptables, p.firewall.nftables
}

// backendOf is the backend plugin np really uses on this host.
func (p *plugins) backendOf(ctx context.Context, np netfilterPlugin) string {
	if np.explicit != "" {
		return np.explicit
	}
	if ipt, nft := p.probeFirewall(); !ipt && nft && p.lacksNFTables(ctx, np.typ) == "" {
		return BackendNFTables
	}
	return BackendIPTables
}

// hostportNFT reports whether conf's portmap uses its nftables backend
// here: its DEL deletes by the bare container id.
func (p *plugins) hostportNFT(conf networkConf) bool {
	if conf.info.footprint.HostportNFT { // "backend": "nftables"
		return true
	}
	for _, np := range conf.info.netfilter {
		if np.typ == "portmap" && p.backendOf(context.Background(), np) == BackendNFTables {
			return true
		}
	}
	return false
}

// needsIPTables reports whether a plugin of conf uses iptables here: a
// cleanup of it without iptables is incomplete.
func (p *plugins) needsIPTables(conf networkConf) bool {
	for _, np := range conf.info.netfilter {
		if p.backendOf(context.Background(), np) == BackendIPTables {
			return true
		}
	}
	return false
}

// recorded is conf's chain as the host registry records it: each
// plugin with the backend it really uses here.
func (p *plugins) recorded(conf networkConf) []registry.Plugin {
	out := make([]registry.Plugin, len(conf.info.pluginTypes))
	for i, typ := range conf.info.pluginTypes {
		out[i].Type = typ
		for _, np := range conf.info.netfilter {
			if np.typ == typ {
				out[i].Backend = p.backendOf(context.Background(), np)
			}
		}
	}
	return out
}
