package attachments

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

	"github.com/seed1280861d/cninet/internal/errs"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// NetDriver runs one network's plugins for one attachment. Setup, Check
// and Teardown send the same port mappings and args through it.
type NetDriver interface {
	// Add runs n's ADD chain and returns the result as go-cni reads it
	// and, where the driver has it, the plugins' own result (raw); nil
	// raw from an injected Config.CNI.
	Add(ctx context.Context, req Request, att Attachment, netns string) (res *cni.Result, raw *types100.Result, err error)
	// AddPlugin runs the ADD of n's plugin of type typ alone, with the
	// attachment's result as prevResult: a repair (Check with
	// CheckOptions.Repair) restores that plugin's footprint with it.
	AddPlugin(ctx context.Context, req Request, att Attachment, netns, typ string, prev types.Result) error
	// Del runs the plugins of n's DEL chain that run lets run, as the
	// prevention decided (footprint.Prevention.Filter). A filter that
	// runs some plugins apart from the network's own DEL
	// (footprint.HostportsAlone: portmap's, once for a whole workload)
	// runs on no libcni cache: the networks' own DELs still need their
	// cached results.
	Del(ctx context.Context, req Request, att Attachment, netns string, run footprint.PluginFilter) error
	// Check runs n's CHECK chain without the plugins of the types in
	// omit (those whose CHECK is unsound on this host).
	Check(ctx context.Context, req Request, att Attachment, netns string, omit []string) error
	// RunsPlugins reports whether cninet runs the plugin binaries from
	// PluginDirs itself, so it can look for them first and ask them
	// their versions.
	RunsPlugins() bool
}

// Drivers picks the driver of each attachment: Config.CNI (go-cni by
// default) for the default network as the first interface, libcni for
// any other (Lib; tests replace it).
type Drivers struct {
	CNI         cni.CNI
	FindPlugins bool      // the default go-cni: it runs the plugins from the plugin dirs, which cninet can look for first
	Lib         NetDriver // attaches what go-cni cannot: any network but the default as eth0
}

// DriverFor returns the driver that attaches n.
func (ds *Drivers) DriverFor(att Attachment) NetDriver {
	if att.ViaCNI {
		return cniDriver{ds}
	}
	return ds.Lib
}

// canOmit reports whether att's DEL can leave plugins out: an injected
// Config.CNI runs whole chains only.
func (ds *Drivers) canOmit(att Attachment) bool {
	return !att.ViaCNI || ds.FindPlugins
}

// PluginAdder is cninet.PluginAdder: an injected Config.CNI that can ADD
// one plugin of the network's chain alone.
type PluginAdder interface {
	AddPlugin(ctx context.Context, id, netns, pluginType string, prevResult types.Result, opts ...cni.NamespaceOpts) error
}

// cniDriver attaches the default network as the first interface through
// Config.CNI (go-cni by default): the single-network path, as it always was.
type cniDriver struct{ drivers *Drivers }

func (d cniDriver) Add(ctx context.Context, req Request, _ Attachment, netns string) (*cni.Result, *types100.Result, error) {
	res, err := d.drivers.CNI.Setup(ctx, req.ID, netns, req.opts()...)
	if err != nil {
		return nil, nil, err
	}
	var raw *types100.Result
	if r := res.Raw(); len(r) == 1 {
		raw = r[0]
	}
	return res, raw, nil
}

// AddPlugin goes through libcni: go-cni runs whole chains only. An
// injected Config.CNI runs one plugin alone only if it says it can
// (PluginAdder).
func (d cniDriver) AddPlugin(ctx context.Context, req Request, att Attachment, netns, typ string, prev types.Result) error {
	if d.drivers.FindPlugins {
		return d.drivers.Lib.AddPlugin(ctx, req, att, netns, typ, prev)
	}
	if pa, ok := d.drivers.CNI.(PluginAdder); ok {
		return pa.AddPlugin(ctx, req.ID, netns, typ, prev, req.opts()...)
	}
	return fmt.Errorf("%w: %s's ADD of network %q cannot run alone", errWholeChainsOnly, typ, att.Name())
}

// Del runs go-cni's Remove, which runs the whole chain; a part of the
// chain goes through libcni on the same plugin and cache directories. An
// injected Config.CNI runs its plugins itself, so it runs no part of a
// chain: no DEL, and the force cleanup removes what it can prove.
func (d cniDriver) Del(ctx context.Context, req Request, att Attachment, netns string, run footprint.PluginFilter) error {
	switch {
	case run.Whole():
		return d.drivers.CNI.Remove(ctx, req.ID, netns, req.opts()...)
	case d.drivers.FindPlugins:
		return d.drivers.Lib.Del(ctx, req, att, netns, run)
	case run.Apart():
		return errWholeChainsOnly
	}
	return fmt.Errorf("%w: %s must be left out of network %q's DEL", errWholeChainsOnly, strings.Join(run.LeftOut(), ", "), att.Name())
}

// errWholeChainsOnly says an injected Config.CNI cannot run one plugin of
// a chain alone.
var errWholeChainsOnly = errors.New("the injected CNI runs whole DEL chains only")

// Check runs go-cni's Check, which runs the whole chain; a chain without
// some plugins goes through libcni on the same plugin and cache
// directories. An injected Config.CNI checks whole chains.
func (d cniDriver) Check(ctx context.Context, req Request, att Attachment, netns string, omit []string) error {
	if len(omit) > 0 && d.drivers.FindPlugins {
		return d.drivers.Lib.Check(ctx, req, att, netns, omit)
	}
	return d.drivers.CNI.Check(ctx, req.ID, netns, req.opts()...)
}

func (d cniDriver) RunsPlugins() bool { return d.drivers.FindPlugins }

// LibDriver attaches any network under any interface name through libcni
// directly. go-cni cannot: it names a network's interface after the
// network's place in its own list, so it could never put a workload's
// second network, alone, on eth1.
type LibDriver struct {
	Lib *libcni.CNIConfig
	// NoCache is lib on a cache directory nothing ever writes: a DEL
	// only removes from it, so a DEL through it leaves libcni's cache
	// alone.
	NoCache *libcni.CNIConfig
	// Exec runs a plugin alone (AddPlugin): libcni runs only whole
	// chains, and a chain's first plugin is never given a prevResult.
	Exec invoke.Exec
}

// RuntimeConf is what libcni is told about n's attachment: the same
// container id and args as every network, the port mappings and the
// other capability arguments only where the conflist declares them.
func (d LibDriver) RuntimeConf(req Request, att Attachment, netns string) *libcni.RuntimeConf {
	return RuntimeConfOf(req, att, netns)
}

// RuntimeConfOf is what libcni is told about att's attachment (see
// LibDriver.RuntimeConf).
func RuntimeConfOf(req Request, att Attachment, netns string) *libcni.RuntimeConf {
	rt := &libcni.RuntimeConf{ContainerID: req.ID, NetNS: netns, IfName: att.IfName, Args: req.Args}
	rt.CapabilityArgs = att.Conf.Info.Declared(req.Mappings, req.Caps)
	return rt
}

func (d LibDriver) Add(ctx context.Context, req Request, att Attachment, netns string) (*cni.Result, *types100.Result, error) {
	res, err := d.Lib.AddNetworkList(ctx, att.Conf.List, d.RuntimeConf(req, att, netns))
	if err != nil {
		return nil, nil, err
	}
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: network %q: converting the result: %w", errs.NoAddress, att.Name(), err)
	}
	out, err := ResultFromCNI(r, att.IfName)
	return out, r, err
}

// Del runs a part of the chain apart from the network's own DEL on
// noCache: libcni's cached result stays for that DEL.
func (d LibDriver) Del(ctx context.Context, req Request, att Attachment, netns string, run footprint.PluginFilter) error {
	lib := d.Lib
	if run.Apart() {
		lib = d.NoCache
	}
	return lib.DelNetworkList(ctx, filtered(att.Conf.List, run), d.RuntimeConf(req, att, netns))
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

// AddPlugin runs the ADD of att's plugin of type typ alone, configured as
// libcni configures each plugin of a chain (the list's name and CNI
// version, the capability arguments it declares as runtimeConfig) and
// given prev, the attachment's result, as prevResult, with the same
// environment libcni gives it. Nothing is cached: libcni's cache keeps
// the whole chain's result.
func (d LibDriver) AddPlugin(ctx context.Context, req Request, att Attachment, netns, typ string, prev types.Result) error {
	list := att.Conf.List
	i := slices.IndexFunc(list.Plugins, func(p *libcni.PluginConfig) bool { return p.Network != nil && p.Network.Type == typ })
	if i < 0 {
		return fmt.Errorf("%w: network %q runs no plugin %q", errs.InvalidConfig, att.Name(), typ)
	}
	prev, err := prev.GetAsVersion(list.CNIVersion)
	if err != nil {
		return fmt.Errorf("network %q: the result as CNI %s: %w", att.Name(), list.CNIVersion, err)
	}
	rt := d.RuntimeConf(req, att, netns)
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
	path, err := d.Exec.FindInPath(typ, d.Lib.Path)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", errs.PluginMissing, typ, err)
	}
	args := &invoke.Args{Command: "ADD", ContainerID: rt.ContainerID, NetNS: rt.NetNS, PluginArgs: rt.Args, IfName: rt.IfName,
		Path: strings.Join(d.Lib.Path, string(os.PathListSeparator))}
	_, err = invoke.ExecPluginWithResult(ctx, path, conf.Bytes, args, d.Exec)
	return err
}

func (d LibDriver) Check(ctx context.Context, req Request, att Attachment, netns string, omit []string) error {
	return d.Lib.CheckNetworkList(ctx, filtered(att.Conf.List, footprint.Without(omit...)), d.RuntimeConf(req, att, netns))
}

func (d LibDriver) RunsPlugins() bool { return true }

// ResultFromCNI turns one network's CNI result into the shape
// StatusFromResult reads, as go-cni does: addresses that name no interface
// belong to the interface the network was asked to create.
func ResultFromCNI(r *types100.Result, ifName string) (*cni.Result, error) {
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
				return nil, fmt.Errorf("%w: an address names interface %d of %d", errs.NoAddress, i, len(r.Interfaces))
			}
			name = r.Interfaces[i].Name
		}
		cfg := out.Interfaces[name]
		cfg.IPConfigs = append(cfg.IPConfigs, &cni.IPConfig{IP: ip.Address.IP, Gateway: ip.Gateway})
	}
	return out, nil
}
