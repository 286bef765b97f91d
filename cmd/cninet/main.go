// Command cninet drives cninet outside an orchestrator, for operators
// debugging a CNI setup: print the default conflist, attach and detach a
// namespace, check it, collect leftovers, and run a self-contained demo.
//
// Exit codes: 0 success, 1 failure, 2 usage error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
)

const usage = `usage: cninet <command> [flags]

Commands:
  conflist   print (or write) the default bridge conflist
  setup      attach a network namespace to each --network and print its status as JSON
  teardown   detach a network namespace and remove what the plugins left
  connect    attach a live workload to one more network of --conf-dir
  disconnect detach a live workload from one network, leaving the others
  check      run CNI CHECK on every network of an attachment
  gc         remove every attachment whose id is not live, in every network
  status     report whether every network can attach workloads
  demo       run the whole story in throwaway namespaces and report
  daemon     serve the cninet-shim CNI plugin on a unix socket (thick mode)

Run 'cninet <command> --help' for a command's flags.
`

// errUsage marks errors that should exit with status 2.
var errUsage = errors.New("usage")

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		fmt.Fprint(stderr, usage)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	commands := map[string]func([]string, io.Writer, io.Writer) error{
		"conflist": cmdConflist, "setup": cmdSetup, "teardown": cmdTeardown,
		"check": cmdCheck, "gc": cmdGC, "status": cmdStatus, "demo": cmdDemo,
		"connect": cmdConnect, "disconnect": cmdDisconnect, "daemon": cmdDaemon,
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "cninet: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	err := cmd(args[1:], stdout, stderr)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.Is(err, errUsage):
		fmt.Fprintf(stderr, "cninet %s: %v\n", args[0], err)
		return 2
	default:
		fmt.Fprintf(stderr, "cninet %s: %v\n", args[0], err)
		return 1
	}
}

// newFlags returns a flag set whose parse errors are usage errors.
func newFlags(name, synopsis string, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: cninet %s %s\n\nFlags:\n", name, synopsis)
		fs.PrintDefaults()
	}
	return fs
}

func parse(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
	}
	return nil
}

// defaultNetwork names the embedded conflist's network, and the network
// the attach commands use when no --network is given.
const defaultNetwork = "nomad"

// networkFlags select the networks and plugins, shared by most commands.
type networkFlags struct {
	confDir, cniPath, logLevel string
	networks                   networkList
	bridge                     bridgeFlags
	trace                      bool
	spans                      *spanTree // with --trace
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

// printTrace prints the spans recorded with --trace.
func (n *networkFlags) printTrace(stderr io.Writer) {
	if n.spans != nil {
		n.spans.print(stderr)
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
		n.spans = startTrace()
		cfg.TracerProvider = n.spans
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

func cmdConflist(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("conflist", "[flags]", stderr)
	var b bridgeFlags
	var write string
	fs.StringVar(&b.name, "network", "nomad", "network name")
	b.register(fs)
	fs.StringVar(&write, "write", "", "write <network>.conflist atomically into this directory instead of printing")
	if err := parse(fs, args); err != nil {
		return err
	}
	conf, err := cninet.BridgeConfList(b.config())
	if err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	if write == "" {
		_, err = stdout.Write(conf)
		return err
	}
	path, err := cninet.WriteConfList(write, conf)
	if err == nil {
		fmt.Fprintln(stdout, path)
	}
	return err
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

func signalContext() (context.Context, context.CancelFunc) {
	return signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
}

// attachCommand parses the flags of a command on one attachment and runs
// fn with a Configurator, the allocation and the namespace path.
func attachCommand(name, synopsis string, needNetns bool, args []string, stderr io.Writer,
	fn func(ctx context.Context, c *cninet.Configurator, alloc *cninet.Allocation, netns string) error) error {
	fs := newFlags(name, synopsis, stderr)
	var a attachFlags
	a.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	alloc, err := a.allocation(needNetns)
	if err != nil {
		return err
	}
	c, err := a.configurator(stderr)
	if err != nil {
		return err
	}
	defer c.Close()
	defer a.printTrace(stderr)
	ctx, cancel := signalContext()
	defer cancel()
	return fn(ctx, c, alloc, a.netns)
}

func cmdSetup(args []string, stdout, stderr io.Writer) error {
	return attachCommand("setup", "--id ID --netns PATH [-p host:container[/proto]]... [flags]", true, args, stderr,
		func(ctx context.Context, c *cninet.Configurator, alloc *cninet.Allocation, netns string) error {
			st, err := c.Setup(ctx, alloc, netns)
			if err != nil {
				return err
			}
			return printJSON(stdout, statusJSON(st))
		})
}

// statusJSON is the first network's interface, addresses and DNS, and,
// for a workload in several networks, "networks": each network's, with
// its "network" name.
func statusJSON(st *cninet.NetworkStatus) map[string]any {
	out := attachmentJSON(cninet.NetworkAttachment{InterfaceName: st.InterfaceName, Address: st.Address, AddressIPv6: st.AddressIPv6, DNS: st.DNS})
	if len(st.Networks) > 1 {
		nets := make([]map[string]any, len(st.Networks))
		for i, n := range st.Networks {
			nets[i] = attachmentJSON(n)
			nets[i]["network"] = n.Network
		}
		out["networks"] = nets
	}
	return out
}

func attachmentJSON(n cninet.NetworkAttachment) map[string]any {
	out := map[string]any{"interface": n.InterfaceName, "address": n.Address.String()}
	if n.AddressIPv6.IsValid() {
		out["address_ipv6"] = n.AddressIPv6.String()
	}
	if n.DNS != nil {
		out["dns"] = n.DNS
	}
	return out
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func cmdTeardown(args []string, stdout, stderr io.Writer) error {
	return attachCommand("teardown", "--id ID [--netns PATH] [-p host:container[/proto]]... [flags]", false, args, stderr,
		func(ctx context.Context, c *cninet.Configurator, alloc *cninet.Allocation, netns string) error {
			return c.Teardown(ctx, alloc, netns)
		})
}

func cmdCheck(args []string, stdout, stderr io.Writer) error {
	return attachCommand("check", "--id ID --netns PATH [-p host:container[/proto]]... [flags]", true, args, stderr,
		func(ctx context.Context, c *cninet.Configurator, alloc *cninet.Allocation, netns string) error {
			err := c.Check(ctx, alloc, netns)
			if errors.Is(err, cninet.ErrCheckUnsupported) {
				fmt.Fprintf(stderr, "cninet check: warning: %v\n", err)
				fmt.Fprintln(stdout, "not checked")
				return nil
			}
			if err != nil {
				return err
			}
			fmt.Fprintln(stdout, "ok")
			return nil
		})
}

func cmdGC(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("gc", "--live ID,ID,... [flags]", stderr)
	var n networkFlags
	n.register(fs)
	// A long GC logs its progress at Info: show it unless told otherwise.
	n.logLevel, fs.Lookup("log-level").DefValue = "info", "info"
	live := fs.String("live", "", "comma-separated ids of the live allocations (required; \"\" with --none-live)")
	noneLive := fs.Bool("none-live", false, "nothing is live: collect every attachment of the networks")
	if err := parse(fs, args); err != nil {
		return err
	}
	ids := []string{}
	switch {
	case *live != "" && *noneLive:
		return fmt.Errorf("%w: --live and --none-live exclude each other", errUsage)
	case *live != "":
		ids = strings.Split(*live, ",")
	case !*noneLive:
		return fmt.Errorf("%w: --live is required (or --none-live)", errUsage)
	}
	c, err := n.configurator(stderr)
	if err != nil {
		return err
	}
	defer c.Close()
	defer n.printTrace(stderr)
	ctx, cancel := signalContext()
	defer cancel()
	report, err := c.GC(ctx, ids)
	if report != nil {
		printJSON(stdout, report)
	}
	return err
}

func cmdStatus(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("status", "[flags]", stderr)
	var n networkFlags
	n.register(fs)
	if err := parse(fs, args); err != nil {
		return err
	}
	c, err := n.configurator(stderr)
	if err != nil {
		return err
	}
	defer c.Close()
	defer n.printTrace(stderr)
	ctx, cancel := signalContext()
	defer cancel()
	if err := c.Status(ctx); err != nil {
		return err
	}
	names := c.Networks()
	for i, name := range names {
		names[i] = strconv.Quote(name)
	}
	if len(names) == 1 {
		fmt.Fprintf(stdout, "ready: network %s\n", names[0])
	} else {
		fmt.Fprintf(stdout, "ready: networks %s\n", strings.Join(names, ", "))
	}
	return nil
}
