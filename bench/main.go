package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/seed1280861d/cninet/internal/cririg"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

type options struct {
	pluginDir     string
	upstreamDir   string
	failonceDir   string
	overheadN     int
	recoveryN     int
	concRounds    int
	gcN           int
	gcBigN        int
	gcWaitN       int
	gcNFTN        int
	gcCountSample int
	gcScaleSizes  []int
	scaleN        int
	multiN        int
	thickN        int
	noiseCap      int
	thickBurst    int
	criN          int
	thickRounds   int
	thickRuns     int
	thickPeak     int
	statusN       int
	statusRuns    int
	scaleSizes    []int
	pressureSizes []int         // host rules (pressure)
	pressureN     int           // workloads per contender (pressure)
	pressureSets  string        // plugin sets whose name holds it (pressure); "": all
	control       bool          // overhead scenarios: a second go-cni as a control
	driftN        int           // live attachments during the flushes (drift)
	driftCheckN   int           // live attachments checked and watched idle (drift)
	driftFlushes  int           // flushes of each kind (drift)
	driftGap      time.Duration // between flushes (drift)
	driftIdle     time.Duration // the idle window (drift)
	driftStorm    int           // flushes in the 10 s storm (drift)
	driftSets     string        // plugin sets whose name holds it (drift); "": all
	only          []string
	rewrite       bool // measure nothing: write the report and plot from the state file
	out, svg      string
	state         string
	goBench       string // output of go test -bench, read from a file
	cpuProfile    string // where to write a CPU profile of the whole run
}

// scenario is one named, separately runnable measurement.
type scenario struct {
	name, what string
	fn         func(*report) error
}

var scenarios = []scenario{
	{"overhead", "Setup+Teardown, cninet vs. go-cni, Debian plugins (iptables)", overheadDebian},
	{"overhead-nft", "Setup+Teardown, cninet vs. go-cni, upstream plugins, nftables backends", overheadNFT},
	{"overhead-scale", "the same with 0/250/1,000 other attachments on the host, three plugin sets", overheadScale},
	{"recovery", "a plugin fails the first ADD: retry policy vs. fixed loop", recovery},
	{"concurrency", "k concurrent Setup+Teardown: per-allocation vs. global lock", concurrency},
	{"cold-start", "32 Setups on a host without the bridge: retry vs. gate", coldStart},
	{"gc", "1,000 leaked attachments (iptables): GC sweep vs. per-id cleanup", gcScenario},
	{"gc-10k", "10,000 leaked attachments (iptables): GC sweep time, processes, memory", gcBigScenario},
	{"gc-nft", "1,000 leaked attachments (nftables backends): GC sweep vs. per-id cleanup", gcNFTScenario},
	{"multinet", "one workload on 1-4 networks: Setup+Teardown, cninet vs. go-cni, Debian and upstream plugins", multiNetwork},
	{"thick", "thick mode: cnitool ADD+DEL through the cninet-shim and daemon vs. on the delegate; a burst of concurrent ADDs and the daemon's peak RSS", thickScenario},
	{"cri", "thick mode under containerd's CRI: crictl runp+stopp+rmp of a pod with a hostPort, through the cninet-shim conflist vs. the delegate conflist directly, one containerd", criScenario},
	{"gc-scale", "1,000 and 10,000 leaked attachments, iptables and nftables backends, swept and after a reboot: GC time, CPU, processes, memory", gcScaleScenario},
	{"gc-setup-wait", "Setups started one after another during a GC of -gc-wait-n (10,000) leaked attachments after a reboot: p50/p99 of their lock wait", gcWaitScenario},
	{"pressure", "a busy host: -pressure-rules kube-proxy-shaped iptables and nftables rules, a writer's 1,000-rule batch every second, 16 workers: Setup and Teardown percentiles, cninet vs. go-cni, three plugin sets", pressureScenario},
	{"registry-status", "cninet status --attachments over a host registry of -status-n (10,000) records, text and JSON", registryStatus},
	{"drift", "live attachments kept whole by the repair watcher: whole-table flushes with -drift-n live, Setup+Teardown with RepairEvery on vs. go-cni, a storm of flushes, Drifts of -drift-check-n, the idle watcher's CPU; three plugin sets", driftScenario},
}

func scenarioNames() []string {
	var names []string
	for _, s := range scenarios {
		names = append(names, s.name)
	}
	return names
}

func main() {
	// containerd runs this binary as its runc in the cri scenario.
	cririg.RunRuncWrapperIfAsked()
	var o options
	var only, sizes, gcSizes, pressureSizes string
	flag.StringVar(&o.pluginDir, "plugins", "/usr/lib/cni", "Debian's CNI plugin directory (iptables backend only)")
	flag.StringVar(&o.upstreamDir, "upstream", "../.cache/cni/v1.9.1", "upstream CNI plugins v1.9.1 (iptables and nftables backends)")
	flag.StringVar(&o.failonceDir, "failonce", "", "directory holding the failonce test plugin")
	flag.IntVar(&o.overheadN, "overhead-n", 40, "Setup+Teardown cycles per contender (overhead, overhead-nft)")
	flag.IntVar(&o.recoveryN, "recovery-n", 8, "workloads per contender in the recovery scenario")
	flag.IntVar(&o.concRounds, "conc-rounds", 3, "rounds per concurrency level")
	flag.IntVar(&o.gcN, "gc-n", 1000, "leaked attachments in the gc scenario")
	flag.IntVar(&o.gcBigN, "gc-big-n", 10000, "leaked attachments in the gc-10k scenario")
	flag.IntVar(&o.gcWaitN, "gc-wait-n", 10000, "leaked attachments the GC of the gc-setup-wait scenario collects")
	flag.IntVar(&o.gcNFTN, "gc-nft-n", 1000, "leaked attachments in the gc-nft scenario")
	flag.IntVar(&o.gcCountSample, "gc-count-sample", 100, "ids whose per-id cleanup is counted in processes (gc, gc-nft)")
	flag.IntVar(&o.scaleN, "scale-n", 12, "Setup+Teardown cycles per contender, per size and plugin set (overhead-scale)")
	flag.IntVar(&o.multiN, "multinet-n", 12, "Setup+Teardown cycles per contender, per plugin set and number of networks (multinet)")
	flag.IntVar(&o.thickN, "thick-n", 30, "cnitool ADD+DEL cycles per contender (thick)")
	flag.IntVar(&o.noiseCap, "noise-cap", 3, "a ratio within the noise of its target after the cycles asked for (-overhead-n, -scale-n, -thick-n) gets more, up to this many times as many; one still within the noise then is reported as not measurable at that spread (1: never more)")
	flag.IntVar(&o.thickBurst, "thick-burst", 200, "concurrent cnitool ADDs per burst, through the shim and on the delegate alike (thick)")
	flag.IntVar(&o.thickRuns, "thick-runs", 3, "runs of -thick-n interleaved cycles (thick): the target holds in every run, each reported; the first is taken apart")
	flag.IntVar(&o.thickRounds, "thick-rounds", 2, "rounds of bursts, each a burst through the shim and one on the delegate, alternating which goes first (thick)")
	flag.IntVar(&o.thickPeak, "thick-peak", 500, "concurrent cnitool ADDs through the shim over which the daemon's peak RSS is measured; 0: none (thick)")
	flag.IntVar(&o.criN, "cri-n", 10, "crictl runp+stopp+rmp cycles per contender (cri)")
	flag.IntVar(&o.statusN, "status-n", 10000, "records in the host registry listed by cninet status --attachments (registry-status)")
	flag.IntVar(&o.statusRuns, "status-runs", 5, "runs of cninet status --attachments per output format (registry-status)")
	flag.BoolVar(&o.control, "control", true, "overhead scenarios: interleave a second go-cni with the two contenders, to measure the machine's noise (go-cni against itself)")
	flag.StringVar(&sizes, "scale-sizes", "0,250,1000", "numbers of other attachments on the host (overhead-scale)")
	flag.StringVar(&gcSizes, "gc-scale-sizes", "1000,10000", "numbers of leaked attachments, per backend (gc-scale)")
	flag.StringVar(&pressureSizes, "pressure-rules", "200000", "comma-separated host sizes: unrelated kube-proxy-shaped rules, in iptables and as many in nftables (pressure)")
	flag.IntVar(&o.pressureN, "pressure-n", 200, "workloads per contender, per plugin set and host size (pressure)")
	flag.StringVar(&o.pressureSets, "pressure-sets", "", "run only the plugin sets whose name holds this (pressure), e.g. nftables or Debian; the others' rows stay as measured before")
	flag.IntVar(&o.driftN, "drift-n", 100, "live attachments while whole tables are flushed, and while Setup+Teardown is measured with RepairEvery on (drift)")
	flag.IntVar(&o.driftCheckN, "drift-check-n", 1000, "live attachments checked by one Drifts and watched idle (drift)")
	flag.IntVar(&o.driftFlushes, "drift-flushes", 20, "whole-table flushes of each kind, per plugin set (drift)")
	flag.DurationVar(&o.driftGap, "drift-gap", 30*time.Second, "time between two flushes' starts, and at least 5 s after the last one's recovery; the watcher refuses a fourth repair of an attachment within a minute (drift)")
	flag.DurationVar(&o.driftIdle, "drift-idle", 90*time.Second, "how long the idle process's CPU is measured, per RepairEvery (drift)")
	flag.IntVar(&o.driftStorm, "drift-storm", 100, "flushes in the 10 s storm, with -drift-n live attachments (drift)")
	flag.StringVar(&o.driftSets, "drift-sets", "", "run only the plugin sets whose name holds this (drift), e.g. nftables or Debian; the others' rows stay as measured before")
	flag.StringVar(&only, "only", "", "comma-separated scenarios to run (default all): "+strings.Join(scenarioNames(), ","))
	flag.BoolVar(&o.rewrite, "rewrite", false, "measure nothing: write the report and the plot again from the state file (-state)")
	flag.StringVar(&o.out, "out", "BENCHMARKS.md", "report to write")
	flag.StringVar(&o.svg, "svg", "bench/results.svg", "plot to write")
	flag.StringVar(&o.state, "state", "results.json", "raw results, read back by -only runs for the scenarios they skip")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the run (the bench process: cninet, go-cni, the bench) to this file")
	flag.StringVar(&o.goBench, "gobench", "", "file with `go test -bench -benchmem` output to include")
	flag.Parse()
	for _, s := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 0 {
			fmt.Fprintf(os.Stderr, "bench: -scale-sizes: %q is not a size\n", s)
			os.Exit(2)
		}
		o.scaleSizes = append(o.scaleSizes, n)
	}
	for _, s := range strings.Split(gcSizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "bench: -gc-scale-sizes: %q is not a size\n", s)
			os.Exit(2)
		}
		o.gcScaleSizes = append(o.gcScaleSizes, n)
	}
	for _, s := range strings.Split(pressureSizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 7 {
			fmt.Fprintf(os.Stderr, "bench: -pressure-rules: %q is not a host size (a number of rules, 7 or more)\n", s)
			os.Exit(2)
		}
		o.pressureSizes = append(o.pressureSizes, n)
	}
	if only != "" {
		for _, s := range strings.Split(only, ",") {
			s = strings.TrimSpace(s)
			if !slices.Contains(scenarioNames(), s) {
				fmt.Fprintf(os.Stderr, "bench: -only: unknown scenario %q (have %s)\n", s, strings.Join(scenarioNames(), ","))
				os.Exit(2)
			}
			o.only = append(o.only, s)
		}
	}
	code, err := netsandbox.Run(func() int {
		if err := run(o); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		return 0
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: entering a throwaway network namespace:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(o options) error {
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	r := &report{started: time.Now(), opts: o}
	if len(o.only) > 0 || o.rewrite {
		if err := r.res.load(o.state); err != nil {
			return err
		}
	}
	// A run of some scenarios (-only) keeps the machine line of the run
	// that measured the others: it is theirs. Scenarios that may run
	// elsewhere say their own machine in their section.
	if !o.rewrite && (len(o.only) == 0 || r.res.Machine == "") {
		r.res.Machine = machine()
	}
	for _, s := range scenarios {
		if o.rewrite || len(o.only) > 0 && !slices.Contains(o.only, s.name) {
			continue
		}
		fmt.Fprintf(os.Stderr, "bench: %s (%s)... [%s]\n", s.name, s.what, time.Since(r.started).Round(time.Second))
		start := time.Now()
		if err := s.fn(r); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
		r.res.mark(s.name, start)
		r.ran = append(r.ran, s.name)
		// Save after every scenario: a later failure keeps what was measured.
		if err := r.res.save(o.state); err != nil {
			return err
		}
	}
	if !o.rewrite {
		r.res.Elapsed = time.Since(r.started)
		if err := r.res.save(o.state); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Dir(o.svg), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(o.svg, []byte(r.plot()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(o.out, []byte(r.markdown()), 0o644)
}
