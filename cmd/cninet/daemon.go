package main

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/thick"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// daemonFlags are cninet daemon's flags.
type daemonFlags struct {
	socket, confDir, cniPath, cacheDir, stateDir, metricsListen, logLevel, logFormat string
	maxConcurrent, maxProbes, memoryLimit                                            int
	timeout, drain, rollback, watch, readyCache, repairEvery                         time.Duration
}

// defaultMemoryLimit is the daemon's soft memory limit, in MiB, unless
// GOMEMLIMIT or --memory-limit says otherwise: a burst of hundreds of
// requests (a node's pods started at once) would otherwise let the heap
// grow to twice what is live before Go's collector runs, while the
// daemon's live memory stays small.
const defaultMemoryLimit = 40

// defaultRepairEvery is how often the daemon checks every runtime's
// attachments for drift (besides at once on an nf_tables change).
const defaultRepairEvery = 30 * time.Second

func (f *daemonFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.socket, "socket", thick.DefaultSocket, "unix socket the cninet-shim plugin connects to; its directory is made 0700 when missing and refused when not root's or writable by group or others; the socket is 0600")
	fs.StringVar(&f.confDir, "conf-dir", thick.DefaultConfDir, "the delegate conflists: a shim conflist named N runs the one named N here (not the runtime's conf dir)")
	fs.StringVar(&f.cniPath, "cni-path", defaultCNIPath(), "plugin directories of the delegate conflists, separated by ':'")
	fs.StringVar(&f.cacheDir, "cache-dir", thick.DefaultCacheDir, "libcni cache of the delegate attachments, apart from the runtime's")
	fs.StringVar(&f.stateDir, "state-dir", thick.DefaultStateDir, "the host registry every process on the host shares: records of the delegate attachments (owner "+thick.Owner+") and the locks")
	fs.StringVar(&f.metricsListen, "metrics-listen", "", "serve /metrics (Prometheus), /healthz and /readyz on this address, e.g. 127.0.0.1:9464 (default: off)")
	fs.StringVar(&f.logLevel, "log-level", "info", "trace, debug, info, warn or error")
	fs.StringVar(&f.logFormat, "log-format", "text", "text, or json (one JSON object a line, for a log collector)")
	fs.IntVar(&f.maxConcurrent, "max-concurrent", thick.DefaultMaxConcurrent, "ADD, DEL and GC requests run at once; more queue until their deadline")
	fs.IntVar(&f.memoryLimit, "memory-limit", defaultMemoryLimit, "soft limit of the Go runtime's memory, in MiB: the collector works harder near it, so a burst of requests does not double the heap (GOMEMLIMIT, when set, wins over the default); 0: none")
	fs.IntVar(&f.maxProbes, "max-concurrent-probes", thick.DefaultMaxConcurrentProbes, "STATUS and CHECK requests run at once, in slots of their own (never queued behind ADDs)")
	fs.DurationVar(&f.rollback, "rollback-timeout", thick.DefaultRollbackTimeout, "after --drain-timeout, how long the rollback of unfinished ADDs may take")
	fs.DurationVar(&f.watch, "conf-watch-interval", thick.DefaultWatchInterval, "how often the conf dir is looked at for changes (SIGHUP reloads at once)")
	fs.DurationVar(&f.timeout, "timeout", thick.DefaultTimeout, "deadline of each request, its wait in the queue included")
	fs.DurationVar(&f.drain, "drain-timeout", 30*time.Second, "on SIGTERM or SIGINT, how long requests in flight may take to finish")
	fs.DurationVar(&f.repairEvery, "repair-every", defaultRepairEvery, "keep every runtime's attachments whole: check them all this often, and at once when the nf_tables ruleset changes (a firewall reload, iptables -F, nft flush ruleset), and repair what is missing in place; 0: no repair watcher")
	fs.DurationVar(&f.readyCache, "ready-cache", thick.DefaultReadyCache, "how long /readyz reuses the delegates' STATUS verdict (concurrent probes share one run; a conf dir reload or SIGHUP drops it; 0: run it for every probe)")
}

// daemonCommand serves the cninet-shim plugin until SIGTERM or SIGINT.
func (c *cli) daemonCommand() *cobra.Command {
	var f daemonFlags
	cmd := &cobra.Command{
		Use:   "daemon [flags]",
		Short: "Serve the cninet-shim CNI plugin on a unix socket (thick mode)",
		Long: `Serve the cninet-shim CNI plugin on a unix socket (thick mode) until SIGTERM or
SIGINT, then drain: requests in flight get --drain-timeout to finish; ADDs
still running then are rolled back. The conf dir may start empty (the daemon
is not ready until a conflist appears); changes to it are picked up by a
watch, and at once on SIGHUP. Under systemd it accepts the socket of
cninet.socket (socket activation) and notifies readiness (Type=notify).`,
	}
	cmd.RunE = c.end.runE(func(cmd *cobra.Command) error {
		if err := f.validate(); err != nil {
			return err
		}
		logger := hclog.New(&hclog.LoggerOptions{Name: "cninet-daemon", Level: hclog.LevelFromString(f.logLevel), Output: c.stderr,
			JSONFormat: f.logFormat == "json"})
		if limit, ok := memoryLimit(f.memoryLimit, cmd.Flags().Changed("memory-limit"), os.Getenv("GOMEMLIMIT")); ok {
			debug.SetMemoryLimit(limit)
		}
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		return runDaemon(ctx, f, logger)
	})
	f.register(cmd.Flags())
	return cmd
}

// memoryLimit is the soft memory limit the daemon sets (ok) from
// --memory-limit (mib, set when given on the command line) and
// GOMEMLIMIT (env): the flag given wins, 0 lifting any limit; else
// GOMEMLIMIT, which the runtime applied already; else the default.
func memoryLimit(mib int, set bool, env string) (limit int64, ok bool) {
	switch {
	case set && mib == 0:
		return math.MaxInt64, true
	case set:
		return int64(mib) << 20, true
	case env != "" || mib == 0:
		return 0, false
	default:
		return int64(mib) << 20, true
	}
}

// cleanAbs is the clean absolute path p names from the working directory,
// offered in a usage error: "..", "." and "//" reach other places than
// the daemon's peers would look for, and the shim's config must name the
// socket exactly.
func cleanAbs(p string) string {
	if abs, err := filepath.Abs(p); err == nil {
		return abs
	}
	return filepath.Clean(p)
}

func (f *daemonFlags) validate() error {
	for name, p := range map[string]string{"--socket": f.socket, "--conf-dir": f.confDir, "--cache-dir": f.cacheDir, "--state-dir": f.stateDir} {
		if !filepath.IsAbs(p) || filepath.Clean(p) != p {
			return fmt.Errorf("%w: %s %q, want a clean absolute path (%q)", errUsage, name, p, cleanAbs(p))
		}
	}
	if f.maxConcurrent < 1 || f.maxProbes < 1 || f.timeout <= 0 || f.drain <= 0 || f.rollback <= 0 || f.watch <= 0 {
		return fmt.Errorf("%w: --max-concurrent, --max-concurrent-probes, --timeout, --drain-timeout, --rollback-timeout and --conf-watch-interval must be positive", errUsage)
	}
	if f.memoryLimit < 0 {
		return fmt.Errorf("%w: --memory-limit %d, want 0 (none) or a size in MiB", errUsage, f.memoryLimit)
	}
	if f.repairEvery < 0 {
		return fmt.Errorf("%w: --repair-every %s, want 0 (no repair watcher) or more", errUsage, f.repairEvery)
	}
	if f.readyCache < 0 {
		return fmt.Errorf("%w: --ready-cache %s, want 0 (no cache) or more", errUsage, f.readyCache)
	}
	if f.logFormat != "text" && f.logFormat != "json" {
		return fmt.Errorf("%w: --log-format %q, want text or json", errUsage, f.logFormat)
	}
	if hclog.LevelFromString(f.logLevel) == hclog.NoLevel {
		return fmt.Errorf("%w: --log-level %q, want trace, debug, info, warn or error", errUsage, f.logLevel)
	}
	return nil
}

// runDaemon serves until ctx is done, then drains; SIGHUP reloads the
// conf dir.
func runDaemon(ctx context.Context, f daemonFlags, logger hclog.Logger) error {
	info := thick.Info{ConfDir: f.confDir, CNIPath: filepath.SplitList(f.cniPath), CacheDir: f.cacheDir, StateDir: f.stateDir}
	m, err := newDaemonMetrics()
	if err != nil {
		return err
	}
	delegates, err := thick.OpenDelegates(info, logger.Named("cninet"), m.provider, func(cfg *cninet.Config) {
		cfg.RepairEvery, cfg.RepairAnyOwner = f.repairEvery, true // every runtime is an owner of its own
	})
	if err != nil {
		return err
	}
	defer delegates.Close()
	// /readyz runs every delegate's plugins: probes reuse one verdict for
	// --ready-cache, and a reload of the conf dir drops it.
	readiness := thick.NewReadinessCache(delegates.Ready, f.readyCache, readyzTimeout)
	delegates.OnReload(readiness.Invalidate)
	if err := os.MkdirAll(f.cacheDir, 0o700); err != nil {
		return fmt.Errorf("cache directory: %w", err)
	}
	l, activated, err := daemonListener(f.socket)
	if err != nil {
		return err
	}
	if err := thick.WriteInfo(f.socket, info); err != nil {
		l.Close()
		return err
	}
	srv := &thick.Server{Delegates: delegates, Info: info, Logger: logger, MaxConcurrent: f.maxConcurrent, MaxConcurrentProbes: f.maxProbes,
		Timeout: f.timeout, RollbackTimeout: f.rollback, Observe: m.observe, Gauges: m}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	var metricsSrv *http.Server
	if f.metricsListen != "" {
		if metricsSrv, err = m.serve(f.metricsListen, srv, readiness.Ready); err != nil {
			srv.Shutdown(context.Background())
			return err
		}
	}
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go delegates.Watch(watchCtx, f.watch)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	ready := "ready"
	if err := readiness.Ready(ctx); err != nil {
		ready = err.Error()
	}
	logger.Info("serving", "socket", f.socket, "socket_activated", activated, "conf_dir", f.confDir, "cni_path", strings.Join(info.CNIPath, ":"),
		"cache_dir", f.cacheDir, "metrics", f.metricsListen, "delegates", ready)
	if err := sdNotify("READY=1"); err != nil {
		logger.Warn("readiness not notified", "error", err)
	}
	for {
		select {
		case err := <-served:
			return fmt.Errorf("serving %s: %w", f.socket, err)
		case <-hup:
			if err := delegates.Reload(); err != nil {
				logger.Warn("SIGHUP: conf dir cannot be loaded; keeping what was loaded", "conf_dir", f.confDir, "error", err)
			} else {
				logger.Info("SIGHUP: conf dir reloaded", "conf_dir", f.confDir)
			}
			continue
		case <-ctx.Done():
		}
		break
	}
	sdNotify("STOPPING=1")
	return drain(srv, metricsSrv, f, logger, served, !activated)
}

// daemonListener is the socket systemd passed (socket activation), else
// one of our own at socket (thick.Listen). Either way the socket's
// directory must follow the socket directory rule: the info file goes
// there.
func daemonListener(socket string) (l net.Listener, activated bool, err error) {
	if l, err = activatedListener(); err != nil || l == nil {
		if err != nil {
			return nil, false, err
		}
		l, err = thick.Listen(socket)
		return l, false, err
	}
	if err := thick.PrepareSocketDir(filepath.Dir(socket)); err != nil {
		l.Close()
		return nil, false, err
	}
	if addr := l.Addr().String(); addr != socket {
		l.Close()
		return nil, false, fmt.Errorf("socket activation: systemd passed a socket at %q, but --socket is %q (the shim and the info file follow --socket): make them agree", addr, socket)
	}
	// systemd owns the socket file: closing must not unlink it, or the
	// next activation would find none.
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	return l, true, nil
}

// drain stops taking requests (readyz says so), lets those in flight
// finish within the drain timeout, rolls back the ADDs still running
// then, and removes the socket (unless systemd passed it); the info file
// and the conf dir stay, the info file for the shims' DELs while the
// daemon is down.
func drain(srv *thick.Server, metricsSrv *http.Server, f daemonFlags, logger hclog.Logger, served chan error, removeSocket bool) error {
	logger.Info("draining", "timeout", f.drain)
	ctx, cancel := context.WithTimeout(context.Background(), f.drain)
	defer cancel()
	err := srv.Shutdown(ctx)
	if serr := <-served; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	if removeSocket {
		os.Remove(f.socket)
	}
	if metricsSrv != nil {
		metricsSrv.Close()
	}
	if errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, thick.ErrUnfinished) {
		// Every request ended: those the timeout cut short were rolled
		// back and told so. Nothing is left behind; the exit is clean.
		logger.Warn("drain timeout passed; the ADDs still running were rolled back", "timeout", f.drain)
		err = nil
	}
	if err != nil {
		return fmt.Errorf("draining: %w", err)
	}
	logger.Info("stopped")
	return nil
}
