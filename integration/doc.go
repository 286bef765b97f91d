// Package integration drives cninet against the real CNI reference plugins,
// inside a network and mount namespace of its own (see internal/netsandbox),
// and audits that nothing is left behind.
//
// The package holds tests only; each file tells one story. In reading
// order:
//
//   - main_test.go: TestMain (the sandbox), and what every story uses: a
//     network of its own per test, a Configurator on it, a baseline
//     snapshot and assertNoLeaks, a workload serving HTTP and fetch.
//   - sandbox_test.go: the rig itself: deleting a workload's namespace
//     removes its path even while something still has it open.
//   - lifecycle_test.go: one workload on one network: Setup, served
//     through the mapped port, CHECK of a healthy and a broken
//     attachment, Teardown leaving nothing; networks loaded from a
//     conf directory.
//   - faults_test.go: what goes wrong around one workload: the namespace
//     deleted before Teardown (and go-cni alone leaking then), Setups
//     racing from a cold start, plugins that fail once, hang or are
//     missing, a malformed conflist.
//   - gc_test.go: GC removes workloads lost three ways and leaves the live
//     one reachable.
//   - multinetwork_test.go: a workload in two or three networks: served
//     through each (each network maps a host port of its own, asked on its
//     own gateway), rolled back, torn down after its namespace went, GC'd
//     beside a live one, and concurrent Setups with a failing or retried
//     network.
//   - connect_test.go: Connect and Disconnect of one network of a live
//     workload.
//   - ownership_test.go: the same id on two networks, and ids that prefix
//     each other, each own exactly their rules.
//   - histories_test.go: reboot histories in which two attachments hold
//     the same address over time: the new holder keeps its rules.
//   - histories_gc_test.go: GC against those histories: racing Teardowns,
//     and cache files a reboot cut short.
//   - prevention_test.go: while an attachment is torn down, collected,
//     disconnected or rolled back, a live neighbour's rules, counted in a
//     loop, never drop; every sampler proves it sampled while the
//     operation ran, and the positive controls show, on each plugin set,
//     that the DEL run without cninet (through libcni) does drop the
//     counts the samplers watch.
//   - crash_test.go: a runner killed in the middle of a Teardown never
//     costs the live neighbour its rules.
//   - crashmatrix_test.go: the crash matrix: Setup (with a retry),
//     Teardown, Connect, Disconnect and GC, each in a runner killed right
//     after its k-th plugin command (the killwrap plugin, the IPAM plugin
//     included), for every k, at each of cninet's killpoints (a record
//     written; a cleanup's rules, then files, removed), and a Disconnect
//     killed after its DEL returned; then a restarted runner's Teardown
//     alone leaves nothing of the departed allocation, nor does its GC
//     after, and live neighbours never lose a rule (the sampler's
//     positive control last).
//   - owners_test.go: one host, many owners: another owner's GC (in this
//     process or another, sharing libcni's cache or not) never touches a
//     live attachment; a host without iptables gets nftables from the
//     plugins, and a Disconnect keeps the other network's port mappings;
//     two processes tearing down one id take turns, both running their
//     DELs (and overlap when they share no registry: the control).
//   - hostshare_test.go: one host shared: two runtimes through the shim,
//     one's cnitool gc (libcni's DEL-then-GC) never taking the other's
//     live workload; a workload cnitool made itself never collected
//     while it lives; a newer cninet's record kept byte for byte; a GC
//     of 2,000 leaked attachments that does not hold up a Setup.
//   - xtables_lock_test.go: Setup and Teardown while another process holds
//     the xtables lock end by their deadline and leave nothing.
//   - xtables_bursts_test.go: 50 concurrent Setup+Teardown cycles, each
//     with a port mapping, while another writer takes the xtables lock in
//     bursts (200 ms held, 100 ms free) all succeed and leave nothing.
//   - plugins_test.go: plugins beyond the default conflist (bandwidth,
//     tuning, ptp) leave nothing once the workload is gone.
//   - backend_test.go: Status knows which installed plugins have the
//     nftables backends.
//   - handles_test.go: iptables and nftables rules are deleted by handle,
//     exactly the chosen ones among many.
//   - probe_test.go: the answers cninet gets over netlink (iptables
//     probes, the nftables matcher) are what iptables and nft list.
//   - prevention_read_test.go: the search of chains by comment finds what
//     a scan of the tables finds there; BenchmarkPreventionNFTRead times
//     the prevention at 0, 250 and 1,000 others, scanning and searching.
//   - telemetry_test.go: the metrics and spans of a cleanup after the
//     namespace was deleted.
//   - drift_test.go: live workloads kept whole: for each drift (a
//     workload's DNAT jumps, forward rules or masquerade jump deleted;
//     the nat table flushed; a firewall reload; nft flush ruleset; the
//     hostport or masquerade table flushed; its reservation, cached
//     result or host-side veth deleted) on every plugin set, Check names
//     what is missing and Repair restores it as the plugins wrote it (or
//     says it cannot, in place): the port answers, a second Repair
//     changes nothing, and the neighbour's rules never drop meanwhile.
//   - drift_families_test.go: the same on a dual-stack network (both
//     families restored, both gateways answering), and with nftables on
//     a host without iptables, picked by the plugins or named.
//   - drift_watcher_test.go: the repair watcher (RepairEvery ten minutes,
//     so nf_tables notifications alone) makes two workloads whole by
//     itself after a flush; a workload torn down between two flushes,
//     while the watcher repairs, never gets a rule back; after Close a
//     flush stays flushed.
//   - drift_crash_test.go: a repair in a runner killed after each of its
//     steps (a plugin command, or a rule write of its own through
//     iptables or nft: killwrap wraps both) is finished by the next; its
//     Teardown and GC leave nothing; the neighbour never loses a rule.
//   - drift_race_test.go: a repair looping in one process races the
//     attachment's Teardown in another and another owner's GC: nothing
//     of the torn-down attachment comes back or is left.
//   - soak_test.go: many Setup and Teardown cycles at once, with
//     namespaces deleted first, runners that "crash" and GC passes in
//     between, while workloads that stay live answer after each GC; then
//     zero failures and zero leaks.
//   - thick_rig_test.go: thick mode's rig: a daemon (with extra plugin
//     dirs and flags when a test needs them), shim conflists and libcni's
//     cnitool as the runtime.
//   - thick_test.go: thick mode through cnitool: a whole life, GC, a killed
//     daemon, concurrent ADDs and DELs, bad requests, a broken delegate.
//   - thick_lifecycle_test.go: the daemon's life in production: a DEL
//     after the delegate conflist went and the daemon restarted with an
//     empty conf dir, and a SIGTERM whose drain timeout rolls back an ADD
//     hanging in a plugin.
//   - thick_burst_test.go: a burst of 200 concurrent ADDs and DELs on the
//     daemon, and its peak memory.
//   - thick_podman_test.go: Podman runs a container on a shim network.
//   - thick_drift_test.go: on Debian's plugins, cnitool check through the
//     shim passes on a healthy attachment and names what a flush took;
//     the daemon's repair watcher makes it whole again by itself.
package integration
