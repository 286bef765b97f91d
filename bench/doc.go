// Command bench measures cninet side by side with the alternatives, with
// the real CNI plugins, inside throwaway network namespaces, and writes
// BENCHMARKS.md and an SVG plot. Run it with `make bench` (as root).
//
// -only runs a subset of the scenarios; the results of the others are
// taken from the state file (-state) of an earlier run, so the report
// stays whole.
//
// # Files, in reading order
//
//	main.go         flags, the scenarios in order, writing the results
//	state.go        the results of every scenario, kept across runs; plugin sets
//	scenarios.go    the default bridge conflists, Configurators, cleanup logs;
//	                the overhead, recovery, concurrency and cold-start scenarios
//	scale.go        Teardown's cost against the number of other workloads
//	multinet.go     Setup and Teardown on N networks against go-cni
//	footprints.go   leaked attachments' footprints written in bulk
//	gc.go           GC against per-id cleanup of leaked attachments
//	gcscale.go      one GC at thousands of leaked attachments, two shapes
//	reboot.go       the reboot shape: cached results and registry records
//	gcwait.go       Setups during a GC of the reboot shape: their lock wait
//	thick.go        thick mode through cnitool: cycles taken apart, bursts side
//	                by side, and the daemon's peak RSS under a larger one
//	thick_log.go    the daemon's log read line by line: its request lines,
//	                their steps and cninet's phases, per container id
//	thick_handoff.go  each command through the shim taken apart at every
//	                step on both sides (the shim's moments, the daemon's)
//	cri.go          thick mode under containerd's CRI, driven by crictl
//	registry.go     cninet status --attachments over a host registry of 10,000 records
//	pressure.go     a busy host: kube-proxy's rules, a competing writer, 16 workers
//	pressure_report.go  its section of BENCHMARKS.md and its plot; where
//	                the prevention's and the cleanup's time goes at p50/p95/p99
//	hostwork_log.go cninet's "host work timed" lines read: each phase's
//	                reads and writes of the host by kind
//	schedwait.go    the bench's threads' CPU time and run-queue wait
//	drift.go        live attachments kept whole by the repair watcher:
//	                whole-table flushes, Setup+Teardown with RepairEvery
//	                on, a storm, Drifts of many, the idle watcher
//	drift_workloads.go  its network and workloads serving a mapped port
//	drift_log.go    the watcher's log read: repairs, refusals, failures
//	drift_report.go its section of BENCHMARKS.md and its targets
//	procs.go        counting the processes a cleanup starts
//	stats.go        samples, medians, ratios
//	noise.go        the noise a ratio is judged at: the control's spread,
//	                more cycles while a ratio is within it, "not measurable"
//	report.go       BENCHMARKS.md
//	plot.go         the SVG plot
package main
