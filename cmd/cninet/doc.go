// Command cninet drives cninet outside an orchestrator, for operators
// debugging a CNI setup: print the default conflist, attach and detach a
// namespace, check it, collect leftovers, and run a self-contained demo.
// It also runs the daemon of thick mode, which the cninet-shim CNI plugin
// forwards a runtime's requests to.
//
// Exit codes: 0 success, 1 failure, 2 usage error.
//
// # Reading order
//
// Every command is a function cmdNAME(args, stdout, stderr) error; the
// files, from where to start:
//
//   - main.go: the usage text, main, and run, which picks the command and
//     turns its error into the exit code; the helpers every command
//     shares (newFlags, parse, signalContext, printJSON).
//   - flags.go: the flags most commands share: networkFlags (networks,
//     plugins, log level, --trace) and how they build a
//     cninet.Configurator, bridgeFlags (the default bridge conflist),
//     attachFlags (one attachment: --id, --netns, -p), and the repeatable
//     flag values -p and --network.
//   - attach.go: setup, teardown and check, the commands on one
//     attachment, and the JSON setup prints.
//   - connect.go: connect and disconnect, one network of a live workload.
//   - gc.go: gc, collecting every attachment whose id is not live.
//   - status.go: status, whether every network can attach workloads.
//   - conflist.go: conflist, printing or writing the default bridge
//     conflist.
//   - demo.go: demo, the whole story (setup, a served port, teardown, a
//     namespace deleted first, the leak audit) in throwaway namespaces,
//     through internal/sandbox (which does not import package testing).
//   - trace.go: the --trace TracerProvider, which keeps the spans in
//     memory and prints them as a tree with durations.
//   - daemon.go: daemon, serving the cninet-shim plugin on a unix socket
//     through internal/thick until SIGTERM or SIGINT, then draining.
//   - daemon_metrics.go: the daemon's /metrics (Prometheus), /healthz and
//     /readyz.
package main
