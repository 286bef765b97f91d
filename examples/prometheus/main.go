package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/seed1280861d/cninet"
	"go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:9464", "address of the /metrics endpoint (loopback only)")
	confDir := flag.String("conf-dir", "/etc/cni/net.d", "the conflists' directory")
	network := flag.String("network", "", "the default network (default: the first in --conf-dir)")
	every := flag.Duration("status-every", 30*time.Second, "how often to run Status")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *listen, cninet.Config{ConfDir: *confDir, NetworkName: *network}, *every); err != nil {
		log.Fatal(err)
	}
}

// run serves cninet's metrics on listen until ctx is done.
func run(ctx context.Context, listen string, cfg cninet.Config, every time.Duration) error {
	if err := loopbackOnly(listen); err != nil {
		return err
	}
	mp, err := newMeterProvider()
	if err != nil {
		return err
	}
	defer mp.Shutdown(context.Background())
	cfg.MeterProvider = mp
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: "cninet", Level: hclog.Info})
	c, err := cninet.New(cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	go pollStatus(ctx, c, every)

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.Handler())
	srv := &http.Server{Addr: listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(shutdown)
	}()
	log.Printf("serving cninet's metrics on http://%s/metrics", listen)
	if err := srv.ListenAndServe(); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// newMeterProvider is an SDK MeterProvider whose reader is the Prometheus
// exporter, registered with the default Prometheus registry that
// promhttp.Handler serves.
func newMeterProvider() (*sdkmetric.MeterProvider, error) {
	exporter, err := prometheus.New()
	if err != nil {
		return nil, fmt.Errorf("the OTel Prometheus exporter: %w", err)
	}
	return sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter)), nil
}

// pollStatus runs Status now and every interval: cninet_network_ready is
// the last Status's verdict per network.
func pollStatus(ctx context.Context, c *cninet.Configurator, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		if err := c.Status(ctx); err != nil {
			log.Printf("not ready: %v", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// loopbackOnly refuses to serve metrics beyond this host: they name
// allocations' networks and the host's state.
func loopbackOnly(listen string) error {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return fmt.Errorf("--listen %q: %w", listen, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return fmt.Errorf("--listen %q: want a loopback address such as 127.0.0.1:9464", listen)
	}
	return nil
}
