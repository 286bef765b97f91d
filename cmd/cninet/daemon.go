package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/internal/thick"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// daemonFlags are cninet daemon's flags.
type daemonFlags struct {
	socket, confDir, cniPath, cacheDir, stateDir, metricsListen, logLevel string
	maxConcurrent                                                         int
	timeout, drain                                                        time.Duration
}

func (f *daemonFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.socket, "socket", thick.DefaultSocket, "unix socket the cninet-shim plugin connects to; its directory is made 0700 when missing and refused when not root's or writable by group or others; the socket is 0600")
	fs.StringVar(&f.confDir, "conf-dir", thick.DefaultConfDir, "the delegate conflists: a shim conflist named N runs the one named N here (not the runtime's conf dir)")
	fs.StringVar(&f.cniPath, "cni-path", defaultCNIPath(), "plugin directories of the delegate conflists, separated by ':'")
	fs.StringVar(&f.cacheDir, "cache-dir", thick.DefaultCacheDir, "libcni cache of the delegate attachments, apart from the runtime's")
	fs.StringVar(&f.stateDir, "state-dir", thick.DefaultStateDir, "the host registry every process on the host shares: records of the delegate attachments (owner "+thick.Owner+") and the locks")
	fs.StringVar(&f.metricsListen, "metrics-listen", "", "serve /metrics (Prometheus), /healthz and /readyz on this address, e.g. 127.0.0.1:9464 (default: off)")
	fs.StringVar(&f.logLevel, "log-level", "info", "trace, debug, info, warn or error")
	fs.IntVar(&f.maxConcurrent, "max-concurrent", thick.DefaultMaxConcurrent, "requests run at once; more queue until their deadline")
	fs.DurationVar(&f.timeout, "timeout", thick.DefaultTimeout, "deadline of each request, its wait in the queue included")
	fs.DurationVar(&f.drain, "drain-timeout", 30*time.Second, "on SIGTERM or SIGINT, how long requests in flight may take to finish")
}

// daemonCommand serves the cninet-shim plugin until SIGTERM or SIGINT.
func (c *cli) daemonCommand() *cobra.Command {
	var f daemonFlags
	cmd := &cobra.Command{
		Use:   "daemon [flags]",
		Short: "Serve the cninet-shim CNI plugin on a unix socket (thick mode)",
		Long: `Serve the cninet-shim CNI plugin on a unix socket (thick mode) until SIGTERM or
SIGINT, then drain: requests in flight get --drain-timeout to finish.`,
	}
	cmd.RunE = c.runE(func(*cobra.Command) error {
		if err := f.validate(); err != nil {
			return err
		}
		logger := hclog.New(&hclog.LoggerOptions{Name: "cninet-daemon", Level: hclog.LevelFromString(f.logLevel), Output: c.stderr})
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
		defer stop()
		return runDaemon(ctx, f, logger)
	})
	f.register(cmd.Flags())
	return cmd
}

func (f *daemonFlags) validate() error {
	for name, p := range map[string]string{"--socket": f.socket, "--conf-dir": f.confDir, "--cache-dir": f.cacheDir, "--state-dir": f.stateDir} {
		if !filepath.IsAbs(p) {
			return fmt.Errorf("%w: %s %q, want an absolute path", errUsage, name, p)
		}
	}
	if f.maxConcurrent < 1 || f.timeout <= 0 || f.drain <= 0 {
		return fmt.Errorf("%w: --max-concurrent, --timeout and --drain-timeout must be positive", errUsage)
	}
	if hclog.LevelFromString(f.logLevel) == hclog.NoLevel {
		return fmt.Errorf("%w: --log-level %q, want trace, debug, info, warn or error", errUsage, f.logLevel)
	}
	return nil
}

// runDaemon serves until ctx is done, then drains.
func runDaemon(ctx context.Context, f daemonFlags, logger hclog.Logger) error {
	info := thick.Info{ConfDir: f.confDir, CNIPath: filepath.SplitList(f.cniPath), CacheDir: f.cacheDir, StateDir: f.stateDir}
	m, err := newDaemonMetrics()
	if err != nil {
		return err
	}
	c, err := thick.NewConfigurator(info, logger.Named("cninet"), m.provider)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := os.MkdirAll(f.cacheDir, 0o700); err != nil {
		return fmt.Errorf("cache directory: %w", err)
	}
	l, err := thick.Listen(f.socket)
	if err != nil {
		return err
	}
	if err := thick.WriteInfo(f.socket, info); err != nil {
		l.Close()
		return err
	}
	srv := &thick.Server{C: c, Logger: logger, MaxConcurrent: f.maxConcurrent, Timeout: f.timeout, Observe: m.observe}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(l) }()
	var metricsSrv *http.Server
	if f.metricsListen != "" {
		if metricsSrv, err = m.serve(f.metricsListen, srv); err != nil {
			srv.Shutdown(context.Background())
			return err
		}
	}
	logger.Info("serving", "socket", f.socket, "conf_dir", f.confDir, "cni_path", strings.Join(info.CNIPath, ":"),
		"cache_dir", f.cacheDir, "metrics", f.metricsListen)
	select {
	case err := <-served:
		return fmt.Errorf("serving %s: %w", f.socket, err)
	case <-ctx.Done():
	}
	return drain(srv, metricsSrv, f, logger, served)
}

// drain stops taking requests (readyz says so), lets those in flight
// finish within the drain timeout, and removes the socket; the info file
// stays, for the shims' DELs while the daemon is down.
func drain(srv *thick.Server, metricsSrv *http.Server, f daemonFlags, logger hclog.Logger, served chan error) error {
	logger.Info("draining", "timeout", f.drain)
	ctx, cancel := context.WithTimeout(context.Background(), f.drain)
	defer cancel()
	err := srv.Shutdown(ctx)
	if serr := <-served; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		err = errors.Join(err, serr)
	}
	os.Remove(f.socket)
	if metricsSrv != nil {
		metricsSrv.Close()
	}
	if err != nil {
		return fmt.Errorf("draining: %w", err)
	}
	logger.Info("stopped")
	return nil
}
