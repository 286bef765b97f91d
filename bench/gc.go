package main

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/cninettest/fakes"
)

// The leaked attachments of the GC scenarios: dead runners' attachments
// of their own networks, in the benchmarking ranges.
var (
	gcRange = fakeRange{network: "gcbench", idPrefix: "dead",
		subnet4: netip.MustParsePrefix("198.18.64.0/18"), subnet6: netip.MustParsePrefix("fd00:198:18::/80"), port0: 30000}
	gcNFTRange = fakeRange{network: "gcnft", idPrefix: "gone",
		subnet4: netip.MustParsePrefix("198.18.128.0/18"), subnet6: netip.MustParsePrefix("fd00:198:18:0:aa00::/80"), port0: 30000}
)

// gcConfigurator is a Configurator of r's network with a no-op CNI: only
// cninet's own cleanup runs, the plugins are not involved.
func gcConfigurator(r fakeRange, backend string) (*cninet.Configurator, error) {
	conf, err := gcConfList(r, backend)
	if err != nil {
		return nil, err
	}
	return cninet.New(cninet.Config{ConfList: conf, CNI: &fakes.CNI{}, Owner: gcOwner})
}

// gcOwner owns the leaked attachments the GC scenarios record.
const gcOwner = "bench"

// gcConfList is the conflist of r's network with the backend's plugins.
func gcConfList(r fakeRange, backend string) ([]byte, error) {
	cfg := cninet.DefaultBridgeConfig()
	cfg.NetworkName, cfg.IPAMDataDir, cfg.IPv4Subnet, cfg.Backend = r.network, "/run/cni", r.subnet4.String(), backend
	return cninet.BridgeConfList(cfg)
}

// collect removes leaked attachments of r: by one GC (sweep), which must
// find n, or by one force cleanup (Teardown with the no-op CNI) per id for
// the first n ids. With count, the
// iptables and nft processes are counted (the Configurator is made after
// the shim is in PATH); with mem, the Go heap is sampled.
func collect(r fakeRange, backend string, n int, sweep, count, mem bool) (time.Duration, procCount, memUse, error) {
	d, procs, use, _, err := collectCPU(r, backend, n, sweep, count, mem)
	return d, procs, use, err
}

// collectCPU is collect, also reporting the CPU time it took.
func collectCPU(r fakeRange, backend string, n int, sweep, count, mem bool) (time.Duration, procCount, memUse, cpuUse, error) {
	var sh *shim
	if count {
		var err error
		if sh, err = installShim(); err != nil {
			return 0, procCount{}, memUse{}, cpuUse{}, err
		}
		defer sh.remove()
	}
	c, err := gcConfigurator(r, backend)
	if err != nil {
		return 0, procCount{}, memUse{}, cpuUse{}, err
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	var m *memSampler
	if mem {
		m = startMem()
	}
	cpu := markCPU()
	start := time.Now()
	if sweep {
		rep, err := c.GC(ctx, []string{})
		if err != nil {
			return 0, procCount{}, memUse{}, cpuUse{}, err
		}
		if got := len(rep.IDs()); got != n {
			return 0, procCount{}, memUse{}, cpuUse{}, fmt.Errorf("GC collected %d attachments, want %d", got, n)
		}
	} else {
		for i := 0; i < n; i++ {
			if err := c.Teardown(ctx, &cninet.Allocation{ID: r.at(i).ID}, ""); err != nil {
				return 0, procCount{}, memUse{}, cpuUse{}, err
			}
		}
	}
	d := time.Since(start)
	used := cpu.since()
	var use memUse
	if m != nil {
		use = m.end()
	}
	var procs procCount
	if sh != nil {
		procs = sh.count()
	}
	return d, procs, use, used, nil
}

// checkGone fails unless nothing of attachments 0..n-1 of r is left.
func checkGone(r fakeRange, n int, what string) error {
	ipt, nft, files, err := leftOf(r, 0, n)
	if err != nil {
		return err
	}
	if ipt+nft+files != 0 {
		return fmt.Errorf("%s left %d iptables rules and chains, %d nftables rules, %d reservations of %d attachments", what, ipt, nft, files, n)
	}
	return nil
}

// gcScenario: n leaked attachments (iptables, both families) swept by one
// GC vs. one force cleanup (Teardown) per dead id, timed, then counted in
// iptables processes.
func gcScenario(r *report) error {
	res, err := gcCompare(gcRange, cninet.BackendIPTables, r.opts.gcN, r.opts.gcCountSample)
	if err != nil {
		return err
	}
	r.res.GC = res
	return nil
}

// gcNFTScenario: the same with the nftables backends' footprint.
func gcNFTScenario(r *report) error {
	res, err := gcCompare(gcNFTRange, cninet.BackendNFTables, r.opts.gcNFTN, r.opts.gcCountSample)
	if err != nil {
		return err
	}
	r.res.GCNFT = res
	return nil
}

func gcCompare(rg fakeRange, backend string, n, sample int) (*gcResult, error) {
	res := &gcResult{N: n, PerIDSample: min(sample, n)}
	ipt, nft := backend == cninet.BackendIPTables, backend == cninet.BackendNFTables
	run := func(what string, steps ...func() error) error {
		if err := writeFootprints(rg, 0, n, ipt, nft); err != nil {
			return err
		}
		for _, step := range steps {
			if err := step(); err != nil {
				return err
			}
		}
		return checkGone(rg, n, what)
	}
	var err error
	if err := run("GC sweep", func() error {
		res.Sweep, _, res.SweepMem, res.SweepCPU, err = collectCPU(rg, backend, n, true, false, true)
		return err
	}); err != nil {
		return nil, err
	}
	if err := run("force cleanup per id", func() error {
		res.PerID, _, _, err = collect(rg, backend, n, false, false, false)
		return err
	}); err != nil {
		return nil, err
	}
	if err := run("GC sweep (counted)", func() error {
		_, res.SweepProcs, _, err = collect(rg, backend, n, true, true, false)
		return err
	}); err != nil {
		return nil, err
	}
	// Every id takes the same path through the cleanup, so the processes
	// of per-id cleanup are counted over the first ids only; a sweep
	// removes the rest.
	if err := run("force cleanup per id (counted)", func() error {
		_, res.PerIDProcs, _, err = collect(rg, backend, res.PerIDSample, false, true, false)
		return err
	}, func() error {
		if n == res.PerIDSample {
			return nil
		}
		_, _, _, err = collect(rg, backend, n-res.PerIDSample, true, false, false)
		return err
	}); err != nil {
		return nil, err
	}
	return res, nil
}

// gcBigScenario: gc-big-n leaked attachments (iptables, both families),
// one GC sweep, timed, counted and its memory sampled in the same run
// (the shim adds a shell per process, a few ms in all).
func gcBigScenario(r *report) error {
	n := r.opts.gcBigN
	start := time.Now()
	if err := writeFootprints(gcRange, 0, n, true, false); err != nil {
		return err
	}
	leak := time.Since(start)
	d, procs, mem, cpu, err := collectCPU(gcRange, cninet.BackendIPTables, n, true, true, true)
	if err != nil {
		return err
	}
	if err := checkGone(gcRange, n, "GC"); err != nil {
		return err
	}
	r.res.GCBig = &gcBigResult{N: n, Leak: leak, Sweep: d, Procs: procs, Mem: mem, CPU: cpu}
	return nil
}
