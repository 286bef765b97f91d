package main

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
	"github.com/spf13/pflag"
)

// defaultStateDir is the host registry every process on a host shares;
// defaultOwner owns what the CLI attaches unless --owner says whose.
const (
	defaultStateDir = "/var/lib/cninet"
	defaultOwner    = "cninet"
)

// defaultNetwork names the embedded conflist's network, and the network
// the attach commands use when given no conflists and no --network.
const defaultNetwork = "nomad"

// networkFlags select the networks and plugins: where the conflists come
// from (--conf-dir, --conflist, or the embedded default bridge conflist),
// which networks (--network), the plugins, the log level and --trace.
type networkFlags struct {
	confDir, confList, cniPath, logLevel string
	stateDir, owner                      string
	networks                             networkList
	trace                                bool
	tree                                 *spanTree // with --trace
}

func (n *networkFlags) register(fs *pflag.FlagSet, networkUsage string) {
	fs.StringVar(&n.confDir, "conf-dir", "", "load the conflists from this `directory`")
	fs.StringVar(&n.confList, "conflist", "", "load the one conflist in this `file`")
	fs.Var(&n.networks, "network", networkUsage)
	fs.StringVar(&n.cniPath, "cni-path", defaultCNIPath(), "plugin `directories`, separated by ':'")
	fs.StringVar(&n.logLevel, "log-level", "warn", "log `level`: trace, debug, info, warn or error")
	fs.StringVar(&n.stateDir, "state-dir", defaultStateDir, "the host registry `directory` every process on the host shares (records, locks)")
	fs.StringVar(&n.owner, "owner", defaultOwner, "act for this `owner`: whose attachments setup records, teardown and disconnect detach, and gc collects (another runtime's too, e.g. nomad or containerd)")
	fs.BoolVar(&n.trace, "trace", false, "print what cninet did (its OpenTelemetry spans, go-cni's too) as a tree with durations to stderr")
}

// sourcesHelp says where the conflists come from, in the help of the
// commands that load them.
const sourcesHelp = `The conflists come from --conf-dir (every conflist in the directory) or
--conflist (one file); with neither, from the embedded default bridge
conflist, named by --network (default ` + defaultNetwork + `). To shape that one (subnet,
bridge, backend, …), write it with 'cninet conflist --write DIR' and pass
--conf-dir DIR.`

// attachNetworkUsage is --network's help on the commands that attach.
const attachNetworkUsage = "network to join, in order (repeatable with --conf-dir: eth0, eth1, …; default: the default network of the conflists, " +
	defaultNetwork + " for the embedded one)"

// explicit reports whether the command line names its networks: a
// conflist source or a --network.
func (n *networkFlags) explicit() bool {
	return n.confDir != "" || n.confList != "" || len(n.networks) > 0
}

// printTrace prints the span tree recorded with --trace.
func (n *networkFlags) printTrace(stderr io.Writer) {
	if n.tree != nil {
		n.tree.print(stderr)
	}
}

func defaultCNIPath() string {
	if p := os.Getenv("CNI_PATH"); p != "" {
		return p
	}
	return "/opt/cni/bin:/usr/lib/cni"
}

// config returns the Configurator's Config. With --conf-dir it knows every
// network there, the first --network (if any) being the default; with
// --conflist, the one in the file; with neither, the embedded default
// bridge conflist, named by the one --network if given.
func (n *networkFlags) config(stderr io.Writer) (cninet.Config, error) {
	level := hclog.LevelFromString(n.logLevel)
	if level == hclog.NoLevel {
		return cninet.Config{}, usageErrorf("--log-level %q, want trace, debug, info, warn or error", n.logLevel)
	}
	cfg := cninet.Config{
		Logger:     hclog.New(&hclog.LoggerOptions{Name: "cninet", Level: level, Output: stderr}),
		PluginDirs: filepath.SplitList(n.cniPath),
		StateDir:   n.stateDir,
		Owner:      n.owner,
	}
	if n.stateDir == "" || n.owner == "" {
		return cfg, usageErrorf("--state-dir and --owner must not be empty")
	}
	switch {
	case n.confDir != "" && n.confList != "":
		return cfg, usageErrorf("--conf-dir and --conflist exclude each other")
	case n.confDir != "":
		cfg.ConfDir = n.confDir
		if len(n.networks) > 0 {
			cfg.NetworkName = n.networks[0]
		}
	case len(n.networks) > 1:
		return cfg, usageErrorf("several --network need --conf-dir (a conflist is one network)")
	case n.confList != "":
		conf, err := os.ReadFile(n.confList)
		if err != nil {
			return cfg, usageErrorf("--conflist: %v", err)
		}
		cfg.ConfList = conf
		if len(n.networks) > 0 {
			cfg.NetworkName = n.networks[0]
		}
	default:
		b := cninet.DefaultBridgeConfig()
		b.NetworkName = n.joined()[0]
		conf, err := cninet.BridgeConfList(b)
		if err != nil {
			return cfg, usageErrorf("%v", err)
		}
		cfg.ConfList = conf
	}
	return cfg, nil
}

// configurator builds the Configurator of config, recording its spans
// with --trace.
func (n *networkFlags) configurator(stderr io.Writer) (*cninet.Configurator, error) {
	cfg, err := n.config(stderr)
	if err != nil {
		return nil, err
	}
	if n.trace {
		n.tree = startTrace()
		cfg.TracerProvider = n.tree
	}
	return cninet.New(cfg)
}

// joined returns the networks an attach command joins, in order.
func (n *networkFlags) joined() []string {
	if len(n.networks) == 0 {
		return []string{defaultNetwork}
	}
	return n.networks
}

// bridgeFlags shape the default bridge conflist (the conflist command's).
type bridgeFlags struct {
	name, bridge, subnet, subnet6, dataDir, adminChain, backend string
	hairpin, consul                                             bool
}

func (b *bridgeFlags) register(fs *pflag.FlagSet) {
	d := cninet.DefaultBridgeConfig()
	fs.StringVar(&b.name, "network", defaultNetwork, "network name")
	fs.StringVar(&b.bridge, "bridge", d.BridgeName, "bridge interface name (at most 15 bytes)")
	fs.StringVar(&b.subnet, "subnet", d.IPv4Subnet, "IPv4 subnet")
	fs.StringVar(&b.subnet6, "ipv6-subnet", "", "IPv6 subnet (default: no IPv6)")
	fs.StringVar(&b.dataDir, "ipam-data-dir", d.IPAMDataDir, "host-local reservation directory")
	fs.StringVar(&b.adminChain, "admin-chain", d.AdminChainName, "firewall plugin admin chain")
	fs.BoolVar(&b.hairpin, "hairpin", false, "enable hairpin mode on the bridge")
	fs.BoolVar(&b.consul, "consul-cni", false, "append the consul-cni plugin")
	fs.StringVar(&b.backend, "backend", cninet.BackendIPTables, "what the bridge masquerades and portmap maps ports with: iptables or nftables (plugins v1.6.1 or later)")
}

func (b *bridgeFlags) config() cninet.BridgeConfig {
	return cninet.BridgeConfig{NetworkName: b.name, BridgeName: b.bridge, AdminChainName: b.adminChain,
		IPv4Subnet: b.subnet, IPv6Subnet: b.subnet6, HairpinMode: b.hairpin, ConsulCNI: b.consul, IPAMDataDir: b.dataDir,
		Backend: b.backend}
}

// attachFlags name one attachment.
type attachFlags struct {
	networkFlags
	id, netns string
	ports     portFlags
}

func (a *attachFlags) register(fs *pflag.FlagSet, networkUsage string) {
	a.networkFlags.register(fs, networkUsage)
	fs.StringVar(&a.id, "id", "", "allocation (CNI container) `id` (required)")
	fs.StringVar(&a.netns, "netns", "", "network namespace `path`, e.g. /var/run/netns/NAME")
	fs.VarP(&a.ports, "port", "p", "port mapping host:container[/tcp|/udp|/sctp] (repeatable; default tcp and udp)")
}

func (a *attachFlags) allocation(needNetns bool) (*cninet.Allocation, error) {
	if a.id == "" {
		return nil, usageErrorf("--id is required")
	}
	if err := checkID(a.id); err != nil {
		return nil, usageErrorf("--id: %v", err)
	}
	if needNetns && a.netns == "" {
		return nil, usageErrorf("--netns is required")
	}
	alloc := &cninet.Allocation{ID: a.id, Ports: a.ports}
	if len(a.networks) > 1 {
		alloc.NetworkNames = a.networks
	}
	return alloc, nil
}

// portFlags collects -p host:container[/proto] flags.
type portFlags []cninet.Port

func (p *portFlags) String() string {
	var s []string
	for _, port := range *p {
		s = append(s, fmt.Sprintf("%d:%d", port.Value, port.To))
	}
	return strings.Join(s, ",")
}

func (p *portFlags) Type() string { return "host:container[/proto]" }

func (p *portFlags) Set(v string) error {
	spec, proto, _ := strings.Cut(v, "/")
	host, ctr, ok := strings.Cut(spec, ":")
	if !ok {
		ctr = host
	}
	hp, err1 := strconv.Atoi(host)
	cp, err2 := strconv.Atoi(ctr)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("port mapping %q: want host:container[/tcp|/udp|/sctp]", v)
	}
	if proto != "" && proto != "tcp" && proto != "udp" && proto != "sctp" {
		return fmt.Errorf("port mapping %q: protocol must be tcp, udp or sctp", v)
	}
	*p = append(*p, cninet.Port{Label: v, Value: hp, To: cp, Protocol: proto})
	return nil
}

// networkList collects repeated --network flags, in order.
type networkList []string

func (n *networkList) String() string { return strings.Join(*n, ",") }
func (n *networkList) Type() string   { return "name" }

func (n *networkList) Set(v string) error {
	if v = strings.TrimSpace(v); v == "" {
		return fmt.Errorf("empty network name")
	}
	*n = append(*n, v)
	return nil
}
