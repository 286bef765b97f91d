package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
)

// defaultNetwork names the embedded conflist's network, and the network
// the attach commands use when no --network is given.
const defaultNetwork = "nomad"

// networkFlags select the networks and plugins, shared by most commands.
type networkFlags struct {
	confDir, cniPath, logLevel string
	networks                   networkList
	bridge                     bridgeFlags
	trace                      bool
	tree                       *spanTree // with --trace
}

func (n *networkFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&n.confDir, "conf-dir", "", "load the conflists from this directory (default: the embedded default bridge conflist)")
	fs.Var(&n.networks, "network", "network to join, in order (repeatable with --conf-dir: eth0, eth1, …; default "+defaultNetwork+
		"); gc and status cover every network in --conf-dir")
	fs.StringVar(&n.cniPath, "cni-path", defaultCNIPath(), "plugin directories, separated by ':'")
	fs.StringVar(&n.logLevel, "log-level", "warn", "trace, debug, info, warn or error")
	fs.BoolVar(&n.trace, "trace", false, "print what cninet did (its OpenTelemetry spans, go-cni's too) as a tree with durations to stderr")
	n.bridge.register(fs)
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

// joined returns the networks an attach command joins, in order.
func (n *networkFlags) joined() []string {
	if len(n.networks) == 0 {
		return []string{defaultNetwork}
	}
	return n.networks
}

// configurator builds a Configurator. With --conf-dir it knows every
// network there, the first --network (if any) being the default; without,
// it knows the one embedded network.
func (n *networkFlags) configurator(stderr io.Writer) (*cninet.Configurator, error) {
	cfg := cninet.Config{
		Logger:     hclog.New(&hclog.LoggerOptions{Name: "cninet", Level: hclog.LevelFromString(n.logLevel), Output: stderr}),
		PluginDirs: filepath.SplitList(n.cniPath),
	}
	if n.trace {
		n.tree = startTrace()
		cfg.TracerProvider = n.tree
	}
	if n.confDir != "" {
		cfg.ConfDir = n.confDir
		if len(n.networks) > 0 {
			cfg.NetworkName = n.networks[0]
		}
	} else {
		if len(n.networks) > 1 {
			return nil, fmt.Errorf("%w: several --network need --conf-dir (the embedded conflist is one network)", errUsage)
		}
		n.bridge.name = n.joined()[0]
		conf, err := cninet.BridgeConfList(n.bridge.config())
		if err != nil {
			return nil, fmt.Errorf("%w: %v", errUsage, err)
		}
		cfg.ConfList = conf
	}
	return cninet.New(cfg)
}

// bridgeFlags shape the default bridge conflist.
type bridgeFlags struct {
	name, bridge, subnet, subnet6, dataDir, adminChain, backend string
	hairpin, consul                                             bool
}

func (b *bridgeFlags) register(fs *flag.FlagSet) {
	d := cninet.DefaultBridgeConfig()
	fs.StringVar(&b.bridge, "bridge", d.BridgeName, "bridge interface name (at most 15 bytes)")
	fs.StringVar(&b.subnet, "subnet", d.IPv4Subnet, "IPv4 subnet of the default conflist")
	fs.StringVar(&b.subnet6, "ipv6-subnet", "", "IPv6 subnet of the default conflist (default: no IPv6)")
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

func (a *attachFlags) register(fs *flag.FlagSet) {
	a.networkFlags.register(fs)
	fs.StringVar(&a.id, "id", "", "allocation (CNI container) id (required)")
	fs.StringVar(&a.netns, "netns", "", "network namespace path, e.g. /var/run/netns/NAME")
	fs.Var(&a.ports, "p", "port mapping host:container[/tcp|/udp] (repeatable; default both protocols)")
}

func (a *attachFlags) allocation(needNetns bool) (*cninet.Allocation, error) {
	if a.id == "" {
		return nil, fmt.Errorf("%w: --id is required", errUsage)
	}
	if needNetns && a.netns == "" {
		return nil, fmt.Errorf("%w: --netns is required", errUsage)
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

func (p *portFlags) Set(v string) error {
	spec, proto, _ := strings.Cut(v, "/")
	host, ctr, ok := strings.Cut(spec, ":")
	if !ok {
		ctr = host
	}
	hp, err1 := strconv.Atoi(host)
	cp, err2 := strconv.Atoi(ctr)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("port mapping %q: want host:container[/tcp|/udp]", v)
	}
	if proto != "" && proto != "tcp" && proto != "udp" {
		return fmt.Errorf("port mapping %q: protocol must be tcp or udp", v)
	}
	*p = append(*p, cninet.Port{Label: v, Value: hp, To: cp, Protocol: proto})
	return nil
}

// networkList collects repeated --network flags, in order.
type networkList []string

func (n *networkList) String() string { return strings.Join(*n, ",") }

func (n *networkList) Set(v string) error {
	if v == "" {
		return fmt.Errorf("empty network name")
	}
	*n = append(*n, v)
	return nil
}
