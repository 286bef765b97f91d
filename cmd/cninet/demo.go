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
	"github.com/spf13/cobra"
)

// The demo keeps to the benchmarking range: its traffic never leaves the
// namespaces it creates.
const (
	demoSubnet   = "198.18.0.0/24"
	demoGateway  = "198.18.0.1"
	demoHostPort = 28080
	demoPort     = 8080
)

// demoCommand runs runDemo in throwaway network and mount namespaces.
func (c *cli) demoCommand() *cobra.Command {
	var cniPath, backend string
	var verbose, traced bool
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run the whole story in throwaway namespaces and report",
		Long: `Run the whole story in throwaway network and mount namespaces (root only):
attach a workload serving HTTP with a port mapping, fetch it through the host
port, detach it; attach another, delete its namespace first, detach it; then
audit iptables, nftables, reservations, cache files and links for leaks.
Nothing reaches the host's namespaces.`,
	}
	cmd.RunE = c.end.runE(func(*cobra.Command) error {
		if backend != cninet.BackendIPTables && backend != cninet.BackendNFTables {
			return usageErrorf("--backend %q: want iptables or nftables", backend)
		}
		var result *demoResult
		var demoErr error
		code, err := sandbox.Run(func() int {
			// The child: it reports, as any command does.
			result, demoErr = runDemo(filepath.SplitList(cniPath), backend, verbose, traced, c.textOut(), c.stderr)
			return 0
		})
		if err != nil {
			return fmt.Errorf("entering a throwaway network namespace: %w", err)
		}
		if !sandbox.Child() {
			return exited(code) // the child reported
		}
		if result != nil {
			c.end.done(result, nil)
		}
		return demoErr
	})
	fs := cmd.Flags()
	fs.StringVar(&cniPath, "cni-path", defaultDemoCNIPath(), "plugin directories, separated by ':'")
	fs.StringVar(&backend, "backend", cninet.BackendIPTables, "masquerade and port-map with iptables or nftables (nftables needs plugins v1.6.1 or later in --cni-path)")
	fs.BoolVarP(&verbose, "verbose", "v", false, "log what cninet does")
	fs.BoolVar(&traced, "trace", false, "print what cninet did (its OpenTelemetry spans, go-cni's too) as a tree with durations to stderr")
	return cmd
}

// textOut is where a command that reports as it goes writes its text:
// stdout, or nowhere with --output json (the envelope holds it).
func (c *cli) textOut() io.Writer {
	if c.end.output == outputJSON {
		return io.Discard
	}
	return c.stdout
}

func defaultDemoCNIPath() string {
	if p := os.Getenv("CNI_PATH"); p != "" {
		return p
	}
	return "/usr/lib/cni"
}

type demo struct {
	out    io.Writer
	result demoResult
}

// demoResult is the demo's report in the JSON envelope.
type demoResult struct {
	Steps []demoStep `json:"steps"`
	Leaks []string   `json:"leaks"`
}

type demoStep struct {
	Step   string  `json:"step"`
	Detail string  `json:"detail"`
	TookMS float64 `json:"took_ms,omitempty"`
}

func (d *demo) row(step, detail string, took time.Duration) {
	d.result.Steps = append(d.result.Steps, demoStep{Step: step, Detail: detail, TookMS: float64(took.Microseconds()) / 1000})
	t := ""
	if took > 0 {
		t = fmt.Sprintf("%7.1f ms", float64(took.Microseconds())/1000)
	}
	fmt.Fprintln(d.out, strings.TrimRight(fmt.Sprintf("  %-14s %-64s %s", step, detail, t), " "))
}

// runDemo runs the demo in the namespaces it is in, writing its rows to
// stdout as it goes, and returns its report: the steps it got to, and
// the leaks.
func runDemo(pluginDirs []string, backend string, verbose, traced bool, stdout, stderr io.Writer) (*demoResult, error) {
	d := &demo{out: stdout, result: demoResult{Steps: []demoStep{}, Leaks: []string{}}}
	err := d.run(pluginDirs, backend, verbose, traced, stderr)
	return &d.result, err
}

func (d *demo) run(pluginDirs []string, backend string, verbose, traced bool, stderr io.Writer) error {
	stdout := d.out
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
	d.result.Leaks = append(d.result.Leaks, leaks...)
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
	d.row("setup", fmt.Sprintf("web-1 -> %s on %s", st.Address, st.IfName), time.Since(start))
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
