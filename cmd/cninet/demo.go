package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/sandbox"
)

// The demo keeps to the benchmarking range: its traffic never leaves the
// namespaces it creates.
const (
	demoSubnet   = "198.18.0.0/24"
	demoGateway  = "198.18.0.1"
	demoHostPort = 28080
	demoPort     = 8080
)

// cmdDemo runs runDemo in a throwaway network and mount namespace.
func cmdDemo(args []string, stdout, stderr io.Writer) error {
	fs := newFlags("demo", "[flags]", stderr)
	cniPath := fs.String("cni-path", defaultDemoCNIPath(), "plugin directories, separated by ':'")
	backend := fs.String("backend", cninet.BackendIPTables, "masquerade and port-map with iptables or nftables (nftables needs plugins v1.6.1 or later in --cni-path)")
	verbose := fs.Bool("v", false, "log what cninet does")
	traced := fs.Bool("trace", false, "print what cninet did (its OpenTelemetry spans, go-cni's too) as a tree with durations to stderr")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *backend != cninet.BackendIPTables && *backend != cninet.BackendNFTables {
		return fmt.Errorf("%w: --backend %q: want iptables or nftables", errUsage, *backend)
	}
	code, err := sandbox.Run(func() int {
		if err := runDemo(filepath.SplitList(*cniPath), *backend, *verbose, *traced, stdout, stderr); err != nil {
			fmt.Fprintf(stderr, "cninet demo: %v\n", err)
			return 1
		}
		return 0
	})
	if err != nil {
		return fmt.Errorf("entering a throwaway network namespace: %w", err)
	}
	if code != 0 {
		return fmt.Errorf("demo failed (exit %d)", code)
	}
	return nil
}

func defaultDemoCNIPath() string {
	if p := os.Getenv("CNI_PATH"); p != "" {
		return p
	}
	return "/usr/lib/cni"
}

type demo struct {
	out   io.Writer
	steps int
}

func (d *demo) row(step, detail string, took time.Duration) {
	t := ""
	if took > 0 {
		t = fmt.Sprintf("%7.1f ms", float64(took.Microseconds())/1000)
	}
	fmt.Fprintln(d.out, strings.TrimRight(fmt.Sprintf("  %-14s %-64s %s", step, detail, t), " "))
}

func runDemo(pluginDirs []string, backend string, verbose, traced bool, stdout, stderr io.Writer) error {
	d := &demo{out: stdout}
	cfg := cninet.DefaultBridgeConfig()
	cfg.IPv4Subnet = demoSubnet
	cfg.Backend = backend
	conf, err := cninet.BridgeConfList(cfg)
	if err != nil {
		return err
	}
	confDir, err := os.MkdirTemp("", "cninet-demo-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(confDir)
	path, err := cninet.WriteConfList(confDir, conf)
	if err != nil {
		return err
	}
	level := hclog.Off
	if verbose {
		level = hclog.Debug
	}
	var tree *spanTree
	if traced {
		tree = startTrace()
		defer tree.print(stderr)
	}
	c, err := cninet.New(cninet.Config{
		Logger:  hclog.New(&hclog.LoggerOptions{Name: "cninet", Level: level, Output: stderr}),
		ConfDir: confDir, NetworkName: cfg.NetworkName, PluginDirs: pluginDirs,
		TracerProvider: tree.provider(),
	})
	if err != nil {
		return err
	}
	defer c.Close()
	fmt.Fprintln(stdout, "cninet demo: the default bridge conflist, in a throwaway network namespace")
	d.row("conflist", fmt.Sprintf("%s (loopback, bridge, firewall, portmap), %s, %s", filepath.Base(path), demoSubnet, backend), 0)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := c.Status(ctx); err != nil {
		return err
	}
	d.row("status", "ready: every plugin found in "+strings.Join(pluginDirs, ":"), 0)
	base, err := sandbox.TakeSnapshot()
	if err != nil {
		return err
	}
	if err := d.serveAndFetch(ctx, c); err != nil {
		return err
	}
	if err := d.namespaceDeletedFirst(ctx, c); err != nil {
		return err
	}
	now, err := sandbox.TakeSnapshot()
	if err != nil {
		return err
	}
	leaks := sandbox.Leaks(base, now, sandbox.Allowance{Chains: []string{cfg.AdminChainName}, Links: []string{cfg.BridgeName}})
	d.row("audit", fmt.Sprintf("iptables and nftables rules, chains, reservations, cache files, veths left: %d", len(leaks)), 0)
	if len(leaks) > 0 {
		return fmt.Errorf("leaked:\n  %s", strings.Join(leaks, "\n  "))
	}
	fmt.Fprintln(stdout, "leaks: 0")
	return nil
}

// serveAndFetch attaches a workload that serves HTTP, fetches it through
// the mapped host port, and detaches it.
func (d *demo) serveAndFetch(ctx context.Context, c *cninet.Configurator) error {
	w, err := sandbox.CreateWorkload()
	if err != nil {
		return err
	}
	defer w.Delete()
	stop, err := serve(w, "web-1")
	if err != nil {
		return err
	}
	defer stop()
	alloc := &cninet.Allocation{ID: "web-1", Ports: []cninet.Port{{Label: "http", Value: demoHostPort, To: demoPort}}}
	start := time.Now()
	st, err := c.Setup(ctx, alloc, w.Path)
	if err != nil {
		return err
	}
	d.row("setup", fmt.Sprintf("web-1 -> %s on %s", st.Address, st.InterfaceName), time.Since(start))
	start = time.Now()
	body, err := fetch(ctx, netip.AddrPortFrom(netip.MustParseAddr(demoGateway), demoHostPort))
	if err != nil {
		return err
	}
	d.row("port mapping", fmt.Sprintf("%s:%d -> %s:%d said %q", demoGateway, demoHostPort, st.Address, demoPort, body), time.Since(start))
	start = time.Now()
	if err := c.Teardown(ctx, alloc, w.Path); err != nil {
		return err
	}
	d.row("teardown", "web-1", time.Since(start))
	return nil
}

// namespaceDeletedFirst shows the case the plugins leak in: the runtime
// deleted the namespace before the runner tore the network down.
func (d *demo) namespaceDeletedFirst(ctx context.Context, c *cninet.Configurator) error {
	w, err := sandbox.CreateWorkload()
	if err != nil {
		return err
	}
	alloc := &cninet.Allocation{ID: "web-2", Ports: []cninet.Port{{Value: demoHostPort + 1, To: demoPort}}}
	if _, err := c.Setup(ctx, alloc, w.Path); err != nil {
		w.Delete()
		return err
	}
	if err := w.Delete(); err != nil {
		return err
	}
	start := time.Now()
	if err := c.Teardown(ctx, alloc, w.Path); err != nil {
		return err
	}
	d.row("ns gone first", "web-2: namespace deleted, then Teardown (force cleanup)", time.Since(start))
	return nil
}

func serve(w *sandbox.Workload, name string) (stop func(), err error) {
	var ln net.Listener
	err = w.NS.Do(func(ns.NetNS) error {
		var err error
		ln, err = net.Listen("tcp", fmt.Sprintf(":%d", demoPort))
		return err
	})
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(rw http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(rw, "hello from %s", name)
	})}
	go srv.Serve(ln)
	return func() { srv.Close() }, nil
}

func fetch(ctx context.Context, addr netip.AddrPort) (string, error) {
	client := &http.Client{Timeout: 2 * time.Second}
	var lastErr error
	for i := 0; i < 50; i++ {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr.String()+"/", nil)
		resp, err := client.Do(req)
		if err == nil {
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			return string(body), err
		}
		lastErr = err
		time.Sleep(100 * time.Millisecond)
	}
	return "", lastErr
}
