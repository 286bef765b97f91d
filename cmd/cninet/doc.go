// Command cninet drives cninet outside an orchestrator, for operators
// debugging a CNI setup: print the default conflist, attach and detach a
// namespace, check it, collect leftovers, and run a self-contained demo.
// It also runs the daemon of thick mode, which the cninet-shim CNI plugin
// forwards a runtime's requests to.
//
// It is built on cobra: generated help, `cninet completion
// bash|zsh|fish|powershell`, `cninet man --dir DIR` (the man pages),
// `cninet version` and `--version`.
//
// Exit codes, for every command: 0 success, 1 the operation failed, 2 a
// usage error (cobra's errors in reading the command line included; then
// nothing was done). With --output json every command prints one JSON
// envelope on stdout (output.go documents it).
//
// Safe by default: gc collects only the networks it is pointed at
// (--conf-dir, --conflist or --network; never a default), its live set is
// trimmed and validated (--live, --live-file), --dry-run changes nothing;
// the bridge flags belong to conflist alone.
//
// # Reading order
//
// Every command is a method of cli returning its *cobra.Command; the
// files, from where to start:
//
//   - main.go: run, which builds the command tree (root), runs one
//     command line and turns its error into the exit code; cli, one run,
//     and the helpers every command shares (usageErrorf, signalContext).
//   - output.go: the --output flag and the JSON envelope every command
//     prints with --output json, documented with each command's result;
//     outcome, how a run ends: runE notes the command ran, done keeps
//     what it produced, finish reports it.
//   - flags.go: the flags most commands share: networkFlags (where the
//     conflists come from, networks, plugins, log level, --trace) and how
//     they build a cninet.Configurator, bridgeFlags (the conflist
//     command's), attachFlags (one attachment: --id, --netns, -p), and the
//     repeatable flag values -p and --network.
//   - attach.go: setup, teardown and check, the commands on one
//     attachment, and how a status is printed.
//   - connect.go: connect and disconnect, one network of a live workload.
//   - gc.go: gc, collecting every attachment whose id is not live in the
//     networks named (only --owner's), and its --dry-run, which prints
//     the library's plan (GCOptions.DryRun) and changes nothing.
//   - live.go: the live set: --live values trimmed and validated,
//     --live-file read.
//   - status.go: status, whether every network (or each --network) can
//     attach workloads; with --attachments, the host registry's list.
//   - conflist.go: conflist, printing or writing the default bridge
//     conflist.
//   - version.go: version, cninet's version from the build info.
//   - man.go: man, the man pages written from the command tree in roff
//     (without cobra/doc, which would link a Markdown converter and a
//     YAML library).
//   - demo.go: demo, the whole story (setup, a served port, teardown, a
//     namespace deleted first, the leak audit) in throwaway namespaces,
//     through internal/sandbox (which does not import package testing).
//   - trace.go: the --trace TracerProvider, which keeps the spans in
//     memory and prints them as a tree with durations.
//   - daemon.go: daemon, serving the cninet-shim plugin on a unix socket
//     through internal/thick until SIGTERM or SIGINT, then draining;
//     SIGHUP reloads the conf dir.
//   - daemon_metrics.go: the daemon's /metrics (Prometheus, with its
//     request, in-flight and queue meters under service.name
//     cninet-daemon), /healthz (liveness) and /readyz (the delegates'
//     STATUS, its verdict cached for --ready-cache by
//     thick.ReadinessCache).
//   - daemon_systemd.go: systemd's socket activation (the socket passed
//     as fd 3) and readiness notification (READY=1 on $NOTIFY_SOCKET).
//   - shimdel.go: the hidden shim-del, which cninet-shim runs for a DEL
//     the daemon gave no answer to (request on stdin, its deadline
//     --timeout; the runtime's CNI error on stdout).
package main
