package cninet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	cni "github.com/containerd/go-cni"
	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/seed1280861d/cninet/internal/footprint"
)

// netDriver runs one network's plugins for one attachment. Setup, Check
// and Teardown send the same port mappings and args through it.
type netDriver interface {
	// add runs n's ADD chain and returns the result as go-cni reads it
	// and, where the driver has it, the plugins' own result (raw); nil
	// raw from an injected Config.CNI.
	add(ctx context.Context, req request, att attachment, netns string) (res *cni.Result, raw *types100.Result, err error)
	// addPlugin runs the ADD of n's plugin of type typ alone, with the
	// attachment's result as prevResult: a repair (Check with
	// CheckOptions.Repair) restores that plugin's footprint with it.
	addPlugin(ctx context.Context, req request, att attachment, netns, typ string, prev types.Result) error
	// del runs the plugins of n's DEL chain that run lets run, as the
	// prevention decided (footprint.Prevention.Filter). A filter that
	// runs some plugins apart from the network's own DEL
	// (footprint.HostportsAlone: portmap's, once for a whole workload)
	// runs on no libcni cache: the networks' own DELs still need their
	// cached results.
	del(ctx context.Context, req request, att attachment, netns string, run footprint.PluginFilter) error
	// check runs n's CHECK chain without the plugins of the types in
	// omit (those whose CHECK is unsound on this host).
	check(ctx context.Context, req request, att attachment, netns string, omit []string) error
	// runsPlugins reports whether cninet runs the plugin binaries from
	// PluginDirs itself, so it can look for them first and ask them
	// their versions.
	runsPlugins() bool
}

// drivers picks the driver of each attachment: Config.CNI (go-cni by
// default) for the default network as the first interface, libcni for
// any other (driver; tests replace it).
type drivers struct {
	cni         cni.CNI
	findPlugins bool      // the default go-cni: it runs the plugins from the plugin dirs, which cninet can look for first
	driver      netDriver // attaches what go-cni cannot: any network but the default as eth0
}

// driverFor returns the driver that attaches n.
func (ds *drivers) driverFor(att attachment) netDriver {
	if att.viaCNI {
		return cniDriver{ds}
	}
	return ds.driver
}

// canOmit reports whether att's DEL can leave plugins out: an injected
// Config.CNI runs whole chains only.
func (ds *drivers) canOmit(att attachment) bool {
	return !att.viaCNI || ds.findPlugins
}

// PluginAdder is what an injected Config.CNI may also offer: the ADD of
// one plugin of the network's chain alone, for an attachment made
// before, with its result as prevResult. Check's repair
// (CheckOptions.Repair) restores a plugin's missing rules with it.
// go-cni cannot (cninet then runs the plugin from PluginDirs itself);
// cninettest's fake CNI can. Without it, a repair that needs a plugin's
// ADD fails and says so.
type PluginAdder interface {
	AddPlugin(ctx context.Context, id, netns, pluginType string, prevResult types.Result, opts ...cni.NamespaceOpts) error
}

// cniDriver attaches the default network as the first interface through
// Config.CNI (go-cni by default): the single-network path, as it always was.
type cniDriver struct{ drivers *drivers }

func (d cniDriver) add(ctx context.Context, req request, _ attachment, netns string) (*cni.Result, *types100.Result, error) {
	res, err := d.drivers.cni.Setup(ctx, req.id, netns, req.opts()...)
	if err != nil {
		return nil, nil, err
	}
	var raw *types100.Result
	if r := res.Raw(); len(r) == 1 {
		raw = r[0]
	}
	return res, raw, nil
}

// addPlugin goes through libcni: go-cni runs whole chains only. An
// injected Config.CNI runs one plugin alone only if it says it can
// (PluginAdder).
func (d cniDriver) addPlugin(ctx context.Context, req request, att attachment, netns, typ string, prev types.Result) error {
	if d.drivers.findPlugins {
		return d.drivers.driver.addPlugin(ctx, req, att, netns, typ, prev)
	}
	if pa, ok := d.drivers.cni.(PluginAdder); ok {
		return pa.AddPlugin(ctx, req.id, netns, typ, prev, req.opts()...)
	}
	return fmt.Errorf("%w: %s's ADD of network %q cannot run alone", errWholeChainsOnly, typ, att.name())
}

// del runs go-cni's Remove, which runs the whole chain; a part of the
// chain goes through libcni on the same plugin and cache directories. An
// injected Config.CNI runs its plugins itself, so it runs no part of a
// chain: no DEL, and the force cleanup removes what it can prove.
func (d cniDriver) del(ctx context.Context, req request, att attachment, netns string, run footprint.PluginFilter) error {
	switch {
	case run.Whole():
		return d.drivers.cni.Remove(ctx, req.id, netns, req.opts()...)
	case d.drivers.findPlugins:
		return d.drivers.driver.del(ctx, req, att, netns, run)
	case run.Apart():
		return errWholeChainsOnly
	}
	return fmt.Errorf("%w: %s must be left out of network %q's DEL", errWholeChainsOnly, strings.Join(run.LeftOut(), ", "), att.name())
}

// errWholeChainsOnly says an injected Config.CNI cannot run one plugin of
// a chain alone.
var errWholeChainsOnly = errors.New("the injected CNI runs whole DEL chains only")

// check runs go-cni's Check, which runs the whole chain; a chain without
// some plugins goes through libcni on the same plugin and cache
// directories. An injected Config.CNI checks whole chains.
func (d cniDriver) check(ctx context.Context, req request, att attachment, netns string, omit []string) error {
	if len(omit) > 0 && d.drivers.findPlugins {
		return d.drivers.driver.check(ctx, req, att, netns, omit)
	}
	return d.drivers.cni.Check(ctx, req.id, netns, req.opts()...)
}

func (d cniDriver) runsPlugins() bool { return d.drivers.findPlugins }

// libDriver attaches any network under any interface name through libcni
// directly. go-cni cannot: it names a network's interface after the
// network's place in its own list, so it could never put a workload's
// second network, alone, on eth1.
type libDriver struct {
	lib *libcni.CNIConfig
	// noCache is lib on a cache directory nothing ever writes: a DEL
	// only removes from it, so a DEL through it leaves libcni's cache
	// alone.
	noCache *libcni.CNIConfig
	// exec runs a plugin alone (addPlugin): libcni runs only whole
	// chains, and a chain's first plugin is never given a prevResult.
	exec invoke.Exec
}

// runtimeConf is what libcni is told about n's attachment: the same
// container id and args as every network, the port mappings and the
// other capability arguments only where the conflist declares them.
func (d libDriver) runtimeConf(req request, att attachment, netns string) *libcni.RuntimeConf {
	return runtimeConfOf(req, att, netns)
}

// runtimeConfOf is what libcni is told about att's attachment (see
// libDriver.runtimeConf).
func runtimeConfOf(req request, att attachment, netns string) *libcni.RuntimeConf {
	rt := &libcni.RuntimeConf{ContainerID: req.id, NetNS: netns, IfName: att.ifName, Args: req.args}
	rt.CapabilityArgs = att.conf.Info.Declared(req.mappings, req.caps)
	return rt
}

func (d libDriver) add(ctx context.Context, req request, att attachment, netns string) (*cni.Result, *types100.Result, error) {
	res, err := d.lib.AddNetworkList(ctx, att.conf.List, d.runtimeConf(req, att, netns))
	if err != nil {
		return nil, nil, err
	}
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: network %q: converting the result: %w", ErrNoAddress, att.name(), err)
	}
	out, err := resultFromCNI(r, att.ifName)
	return out, r, err
}

// del runs a part of the chain apart from the network's own DEL on
// noCache: libcni's cached result stays for that DEL.
func (d libDriver) del(ctx context.Context, req request, att attachment, netns string, run footprint.PluginFilter) error {
	lib := d.lib
	if run.Apart() {
		lib = d.noCache
	}
	return lib.DelNetworkList(ctx, filtered(att.conf.List, run), d.runtimeConf(req, att, netns))
}

// filtered returns list with only the plugins run lets run; libcni
// still reads and removes the cached result by the list's name.
func filtered(list *libcni.NetworkConfigList, run footprint.PluginFilter) *libcni.NetworkConfigList {
	if run.Whole() {
		return list
	}
	out := *list
	out.Plugins = slices.DeleteFunc(slices.Clone(list.Plugins), func(p *libcni.PluginConfig) bool {
		if p.Network == nil {
			return run.Apart()
		}
		return !run.Runs(p.Network.Type)
	})
	return &out
}

// addPlugin runs the ADD of att's plugin of type typ alone, configured as
// libcni configures each plugin of a chain (the list's name and CNI
// version, the capability arguments it declares as runtimeConfig) and
// given prev, the attachment's result, as prevResult, with the same
// environment libcni gives it. Nothing is cached: libcni's cache keeps
// the whole chain's result.
func (d libDriver) addPlugin(ctx context.Context, req request, att attachment, netns, typ string, prev types.Result) error {
	list := att.conf.List
	i := slices.IndexFunc(list.Plugins, func(p *libcni.PluginConfig) bool { return p.Network != nil && p.Network.Type == typ })
	if i < 0 {
		return fmt.Errorf("%w: network %q runs no plugin %q", ErrInvalidConfig, att.name(), typ)
	}
	prev, err := prev.GetAsVersion(list.CNIVersion)
	if err != nil {
		return fmt.Errorf("network %q: the result as CNI %s: %w", att.name(), list.CNIVersion, err)
	}
	rt := d.runtimeConf(req, att, netns)
	conf, err := libcni.InjectConf(list.Plugins[i], map[string]any{"name": list.Name, "cniVersion": list.CNIVersion, "prevResult": prev})
	if err != nil {
		return err
	}
	caps := map[string]any{}
	for name, on := range conf.Network.Capabilities {
		if v, ok := rt.CapabilityArgs[name]; on && ok {
			caps[name] = v
		}
	}
	if len(caps) > 0 {
		if conf, err = libcni.InjectConf(conf, map[string]any{"runtimeConfig": caps}); err != nil {
			return err
		}
	}
	path, err := d.exec.FindInPath(typ, d.lib.Path)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrPluginMissing, typ, err)
	}
	args := &invoke.Args{Command: "ADD", ContainerID: rt.ContainerID, NetNS: rt.NetNS, PluginArgs: rt.Args, IfName: rt.IfName,
		Path: strings.Join(d.lib.Path, string(os.PathListSeparator))}
	_, err = invoke.ExecPluginWithResult(ctx, path, conf.Bytes, args, d.exec)
	return err
}

func (d libDriver) check(ctx context.Context, req request, att attachment, netns string, omit []string) error {
	return d.lib.CheckNetworkList(ctx, filtered(att.conf.List, footprint.Without(omit...)), d.runtimeConf(req, att, netns))
}

func (d libDriver) runsPlugins() bool { return true }

// resultFromCNI turns one network's CNI result into the shape
// StatusFromResult reads, as go-cni does: addresses that name no interface
// belong to the interface the network was asked to create.
func resultFromCNI(r *types100.Result, ifName string) (*cni.Result, error) {
	out := &cni.Result{Interfaces: map[string]*cni.Config{ifName: {}}, DNS: []types.DNS{r.DNS}, Routes: r.Routes}
	for _, intf := range r.Interfaces {
		if intf != nil {
			out.Interfaces[intf.Name] = &cni.Config{Mac: intf.Mac, Sandbox: intf.Sandbox, SocketPath: intf.SocketPath, PciID: intf.PciID}
		}
	}
	for _, ip := range r.IPs {
		if ip == nil {
			continue
		}
		name := ifName
		if ip.Interface != nil {
			i := *ip.Interface
			if i < 0 || i >= len(r.Interfaces) || r.Interfaces[i] == nil {
				return nil, fmt.Errorf("%w: an address names interface %d of %d", ErrNoAddress, i, len(r.Interfaces))
			}
			name = r.Interfaces[i].Name
		}
		cfg := out.Interfaces[name]
		cfg.IPConfigs = append(cfg.IPConfigs, &cni.IPConfig{IP: ip.Address.IP, Gateway: ip.Gateway})
	}
	return out, nil
}
