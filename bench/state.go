package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"time"
)

// results is everything measured, kept in the state file so that a run of
// some scenarios (-only) reports the others from an earlier run.
type results struct {
	Machine  string
	Elapsed  time.Duration        // of the last run
	Measured map[string]time.Time // scenario name: when it was last measured
	Took     map[string]time.Duration

	Overhead []overheadResult // scenario 1 per plugin set
	Scale    []scaleResult    // overhead-scale: per plugin set and size
	Recovery *recoveryResult
	Conc     *concResult
	Cold     *coldResult
	GC       *gcResult      // iptables, gc-n, sweep vs. per id
	GCBig    *gcBigResult   // iptables, gc-big-n, sweep only
	GCNFT    *gcResult      // nftables, gc-nft-n, sweep vs. per id
	GCScale  *gcScaleResult // both backends, gc-scale-sizes, sweep only
	GCWait   *gcWaitResult  // gc-setup-wait: Setups during a GC of gc-wait-n

	Multi []multiResult // multinet: per plugin set and number of networks
	Thick *thickResult  // thick: cnitool through the shim vs. the delegate
	CRI   *criResult    // cri: containerd's CRI through the shim vs. the delegate

	Status *statusResult // registry-status: cninet status --attachments over the host registry

	Pressure []pressureResult // pressure: per host size and plugin set

	Drift []driftResult // drift: per plugin set
}

func (r *results) mark(name string, start time.Time) {
	if r.Measured == nil {
		r.Measured, r.Took = map[string]time.Time{}, map[string]time.Duration{}
	}
	r.Measured[name], r.Took[name] = start, time.Since(start)
}

func (r *results) load(path string) error {
	raw, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if err := json.Unmarshal(raw, r); err != nil {
		return fmt.Errorf("reading %s: %w", path, err)
	}
	return nil
}

func (r *results) save(path string) error {
	raw, err := json.MarshalIndent(r, "", " ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(raw, '\n'), 0o644)
}

// pluginSet is one installed set of the reference plugins and the backend
// the bridge masquerades and portmap maps ports with.
type pluginSet struct {
	Name, Dir, Backend string
}

func (o options) debianSet() pluginSet {
	return pluginSet{"Debian 1.1.1 (iptables)", o.pluginDir, "iptables"}
}

func (o options) upstreamSets() []pluginSet {
	return []pluginSet{
		{"upstream v1.9.1 (iptables)", o.upstreamDir, "iptables"},
		{"upstream v1.9.1 (nftables)", o.upstreamDir, "nftables"},
	}
}

// overheadResult is scenario 1 on one plugin set.
type overheadResult struct {
	Set         pluginSet
	Lib, Direct sample
	// The cycles' halves: cninet's Setup and Teardown, go-cni's Setup and
	// Remove.
	LibSetup, LibTeardown, DirectSetup, DirectTeardown sample
	Cleanup                                            sample    // cninet's force cleanup after DEL, from its debug log
	Prevent                                            sample    // cninet's prevention before DEL, from its debug log
	Leftovers                                          int       // Teardowns whose cleanup found something the plugins left
	Procs                                              procCount // one cninet Setup+Teardown, plugins' and cninet's own processes
	DirectProcs                                        procCount // one go-cni Setup+Remove
	RulesIPT                                           int       // iptables + ip6tables rules on the host while measuring
	RulesNFT                                           int       // nftables rules on the host while measuring (iptables-nft's included)

	// The host registry's share per cycle, from cninet's debug log
	// (record=): in Setup, the record before each ADD and its completion
	// after; in Teardown, the proof written before each DEL (part of
	// Prevent) and the record's removal after the detach (outside Prevent
	// and Cleanup); RecordTeardown is the two together.
	RecordSetup, RecordProof, RecordRemoval, RecordTeardown sample

	// cninet's phases per cycle, from its debug log, each summed over
	// the cycle's networks: the ADDs and the DELs (the plugins' share,
	// against go-cni's Setup and Remove), the prevention and the force
	// cleanup, and in each half the wait for the allocation's locks and
	// the finding of its networks or attachments. SetupOutside is a
	// Setup's wall time minus its ADDs and the registry around them;
	// TeardownOutside a Teardown's minus its prevention, DEL, cleanup
	// and the record's removal: what the phases do not explain.
	LibAdd, LibDel, CyclePrevent, CycleCleanup       sample
	SetupLock, SetupFind, TeardownLock, TeardownFind sample
	SetupOutside, TeardownOutside                    sample

	// The CPU of each half: in the bench process (cninet or go-cni, and
	// whatever else the process ran meanwhile) and in the processes it
	// waited for (the plugins, their iptables and nft).
	LibSetupCPU, LibTeardownCPU, DirectSetupCPU, DirectTeardownCPU cpuSamples

	// The control: a second go-cni, interleaved with the two, on the same
	// network (empty when the run had none).
	Control, ControlSetup, ControlTeardown sample
}

// noise is the spread of the cycles' ratio when nothing differs: the
// control's pairs with go-cni, or cninet's where the run had no control.
func (o overheadResult) noise() float64 {
	if len(o.Control) > 0 {
		return spread(o.Direct, o.Control)
	}
	return spread(o.Direct, o.Lib)
}

// call judges cninet/go-cni against overheadTarget at that noise. Where
// the run has a control, its margin is at least how far the control's
// own ratio of medians came from 1: two go-cnis differ by nothing, so a
// ratio that close to its target is not told apart from it, whatever
// the pairs' spread says (it misses drifts that last longer than a
// pair of cycles).
func (o overheadResult) call() ratioCall {
	c := callRatio(o.Lib, o.Direct, o.noise(), overheadTarget)
	if len(o.Control) > 0 {
		if q := ratio(o.Control.median(), o.Direct.median()); q > 0 {
			c.Margin = max(c.Margin, math.Exp(math.Abs(math.Log(q)))-1)
		}
	}
	return c
}

// cpuSamples is the CPU of one half of each cycle: in the bench process
// and in its children; and the bench process's Go heap allocations and
// finished collections.
type cpuSamples struct {
	Self, Children sample
	HeapAlloc      []uint64
	GCs            []int
}

func (c *cpuSamples) add(u cpuUse) {
	c.Self, c.Children = append(c.Self, u.Self), append(c.Children, u.Children)
	c.HeapAlloc, c.GCs = append(c.HeapAlloc, u.HeapAlloc), append(c.GCs, u.GCs)
}

// heap is the median bytes allocated and the collections per half, e.g.
// "412 KiB, 0.5 GC".
func (c cpuSamples) heap() string {
	if len(c.HeapAlloc) == 0 {
		return "–"
	}
	allocs := slices.Clone(c.HeapAlloc)
	slices.Sort(allocs)
	gcs := 0
	for _, n := range c.GCs {
		gcs += n
	}
	return fmt.Sprintf("%d KiB, %.2f GC", allocs[len(allocs)/2]/1024, float64(gcs)/float64(len(c.GCs)))
}

// scaleResult is one plugin set at one number of other attachments.
type scaleResult struct {
	overheadResult
	Others int
}

type recoveryResult struct {
	Lib, Fixed             sample
	LibFailed, FixedFailed int
	// Where cninet's time goes, per workload: the failed first ADD, the
	// DEL and force cleanup after it, the second ADD (from its log).
	FailedAdd, Del, Cleanup, Add sample
}

type concLevel struct {
	K                int
	PerAlloc, Global sample
}

type concResult struct {
	Rounds int
	Levels []concLevel
}

type coldResult struct {
	Retry, Gated               sample
	RetryRetries, GatedRetries int
}

// gcResult is a GC sweep against one force cleanup per id.
type gcResult struct {
	N                      int
	Sweep, PerID           time.Duration
	SweepProcs, PerIDProcs procCount
	PerIDSample            int // PerIDProcs counts the cleanup of this many ids
	SweepMem               memUse
	SweepCPU               cpuUse
}

type gcBigResult struct {
	N     int
	Leak  time.Duration // writing the leaked state
	Sweep time.Duration
	Procs procCount
	Mem   memUse
	CPU   cpuUse
}
