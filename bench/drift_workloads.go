package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"runtime/pprof"
	"sync"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// The drift scenario's network and its live workloads: each serves TCP on
// 8080 behind a host port of its own, and answers when a connection to
// the bridge's address and that port is accepted.

// driftConf is the k-th drift network: a /21 of its own, out of the
// benchConf networks' 198.18.N.0/24 and the gc scenarios' ranges.
func driftConf(set pluginSet, k int) (cninet.BridgeConfig, []byte, error) {
	cfg := cninet.DefaultBridgeConfig()
	cfg.NetworkName, cfg.BridgeName = fmt.Sprintf("drift%d", k), fmt.Sprintf("driftbr%d", k)
	cfg.IPv4Subnet = fmt.Sprintf("198.18.%d.0/21", 200+8*k)
	cfg.IPAMDataDir = "/run/cni"
	if set.Backend == cninet.BackendNFTables {
		cfg.Backend = set.Backend
	}
	conf, err := cninet.BridgeConfList(cfg)
	return cfg, conf, err
}

// driftConfigurator opens a Configurator of the drift network with the
// given RepairEvery (0: no watcher), logging to log at level. The
// watcher's goroutine carries the pprof label drift=watcher
// (-cpuprofile; go tool pprof -tagfocus drift=watcher).
func driftConfigurator(conf []byte, dir string, every time.Duration, log io.Writer, level hclog.Level) (c *cninet.Configurator, err error) {
	pprof.Do(context.Background(), pprof.Labels("drift", "watcher"), func(context.Context) {
		c, err = cninet.New(cninet.Config{ConfList: conf, PluginDirs: []string{dir}, Owner: driftOwner, RepairEvery: every,
			Logger: hclog.New(&hclog.LoggerOptions{Output: log, Level: level})})
	})
	return c, err
}

// driftNet is one plugin set's drift network and its live workloads.
type driftNet struct {
	set   pluginSet
	conf  []byte
	gw    netip.Addr
	plain *cninet.Configurator // sets up and tears down; no watcher
	live  []*liveWorkload
}

// liveWorkload is a workload serving TCP on 8080, mapped to a host port.
type liveWorkload struct {
	alloc *cninet.Allocation
	w     *netsandbox.Workload
	ln    net.Listener
	port  netip.AddrPort // the bridge's address and the host port
}

// grow sets up workloads until n are live, driftWorkers at a time.
func (d *driftNet) grow(n int) error {
	from := len(d.live)
	if n <= from {
		return nil
	}
	ws := make([]*liveWorkload, n-from)
	errs := make(chan error, n-from)
	next := make(chan int)
	var wg sync.WaitGroup
	for range driftWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				lw, err := d.setUp(from + i)
				ws[i] = lw
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	for i := range ws {
		next <- i
	}
	close(next)
	wg.Wait()
	close(errs)
	for _, lw := range ws {
		if lw != nil {
			d.live = append(d.live, lw)
		}
	}
	return <-errs // nil when none failed
}

// setUp creates workload i: its namespace, Setup, a TCP listener on 8080.
func (d *driftNet) setUp(i int) (*liveWorkload, error) {
	w, err := netsandbox.CreateWorkload()
	if err != nil {
		return nil, err
	}
	port := driftPort0 + i
	lw := &liveWorkload{alloc: benchAlloc(fmt.Sprintf("drift-%d-%04d", setOrder(d.set), i), port), w: w,
		port: netip.AddrPortFrom(d.gw, uint16(port))}
	ctx, cancel := ctxMinute()
	defer cancel()
	if _, err := d.plain.Setup(ctx, lw.alloc, w.Path); err != nil {
		w.Delete()
		return nil, fmt.Errorf("setting up workload %d: %w", i, err)
	}
	err = w.NS.Do(func(ns.NetNS) error {
		var err error
		lw.ln, err = net.Listen("tcp", ":8080") // the socket stays in the workload's namespace
		return err
	})
	if err != nil {
		return lw, fmt.Errorf("listening in workload %d: %w", i, err)
	}
	go func() {
		for {
			c, err := lw.ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return lw, nil
}

// teardown tears every live workload down.
func (d *driftNet) teardown() error {
	errs := make(chan error, len(d.live))
	next := make(chan *liveWorkload)
	var wg sync.WaitGroup
	for range driftWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for lw := range next {
				if lw.ln != nil {
					lw.ln.Close()
				}
				ctx, cancel := ctxMinute()
				if err := d.plain.Teardown(ctx, lw.alloc, lw.w.Path); err != nil {
					errs <- fmt.Errorf("tearing down %s: %w", lw.alloc.ID, err)
				}
				cancel()
				lw.w.Delete()
			}
		}()
	}
	for _, lw := range d.live {
		next <- lw
	}
	close(next)
	wg.Wait()
	close(errs)
	d.live = nil
	return <-errs
}

// ports are the mapped ports of the first n live workloads.
func (d *driftNet) ports(n int) []netip.AddrPort {
	out := make([]netip.AddrPort, min(n, len(d.live)))
	for i := range out {
		out[i] = d.live[i].port
	}
	return out
}

// answers reports whether a TCP connection to p is accepted.
func answers(p netip.AddrPort) bool {
	c, err := net.DialTimeout("tcp", p.String(), 200*time.Millisecond)
	if err != nil {
		return false
	}
	c.Close()
	return true
}

// probe tries each port until it answers, until limit after t0: each
// port's time to answer after t0 (0: it never did), and how many did
// not answer at the first try.
func probe(ports []netip.AddrPort, t0 time.Time, limit time.Duration) (at []time.Duration, stopped int) {
	at = make([]time.Duration, len(ports))
	pending := make([]int, len(ports))
	for i := range pending {
		pending[i] = i
	}
	for round := 0; len(pending) > 0 && time.Since(t0) < limit; round++ {
		left := pending[:0]
		for _, i := range pending {
			if answers(ports[i]) {
				at[i] = max(time.Since(t0), time.Nanosecond)
				continue
			}
			left = append(left, i)
		}
		if round == 0 {
			stopped = len(left)
		}
		pending = left
		if len(pending) > 0 {
			time.Sleep(5 * time.Millisecond)
		}
	}
	return at, stopped
}

// repairSpan is the first and the last time to answer, and whether every
// port answered.
func repairSpan(at []time.Duration) (first, last time.Duration, all bool) {
	all = len(at) > 0
	for _, d := range at {
		if d == 0 {
			all = false
			continue
		}
		if first == 0 || d < first {
			first = d
		}
		last = max(last, d)
	}
	return first, last, all
}
