// Package cninet gives a workload's network namespace CNI networking the way
// an orchestrator's allocation runner needs it: load or generate a conflist,
// attach the namespace with port mappings, report the address, and detach it
// again without leaving iptables or nftables rules, chains, IP reservations
// or cache entries behind — and without touching anything of a neighbour.
//
// Build one Configurator per program with New, from conflist bytes
// (BridgeConfList generates the default bridge network; Config.ConfLists
// adds more) or from a directory (every network in it is known;
// Config.NetworkName is the default), and Close it at exit. Then, per
// workload:
//
//   - Setup attaches the namespace and returns its address. An Allocation
//     joins the networks its NetworkNames lists, in order, as eth0, eth1,
//     …, or the default network; the networks attach concurrently, all or
//     nothing, and NetworkStatus.Interfaces has each one's addresses.
//     Failed ADDs are retried per Config.Retry.
//   - Teardown detaches it: CNI DEL with the same port mappings and args,
//     then a force cleanup of everything the plugins are known to leave,
//     for IPv4 and IPv6, on the plugins' iptables and nftables backends.
//     It is idempotent and works when the namespace is already gone.
//   - Connect attaches a live workload to one more network, Disconnect
//     detaches it from one (ConnectOptions name the interface, as a CNI
//     runtime does).
//   - Check verifies an attachment after a runner restart (CheckOptions
//     narrow it to one).
//
// Once per program start, GC removes every attachment of this
// Configurator's owner (Config.Owner) whose allocation is not live, and
// what no one's record or cache remembers (GCOptions narrow it or make it
// a dry run). Status reports whether each network can attach workloads;
// Reload (or Config.Watch) picks up changed conflists; Attachments lists
// the host registry (Config.StateDir), which every process on the host
// that uses cninet shares.
//
// Cleanup deletes only what provably belongs to the attachment: rules
// whose comment names exactly its network and id, chains under the names
// the plugins derive from them, and rules that name no network only for
// an address the attachment provably held and nobody else holds now
// (docs/design.md).
//
// Calls for one allocation ID are serialised across every process on the
// host that shares the StateDir; calls for different IDs run in parallel.
// Every error wraps one of the exported Err… sentinels and keeps its
// cause: test them with errors.Is. Package cninettest has fakes for an
// importer's unit tests; package host documents the seams (IPTables,
// NFTables, Links) through which cninet reaches the host.
package cninet

/*
For the developers of cninet: the vocabulary and the files of this
package. The layers and the other packages are in docs/architecture.md.

# Vocabulary

One noun per concept, in the documentation and in the code:

  - allocation: the workload as the caller names it (Allocation); its ID
    is the CNI container ID.
  - network: a configured CNI network, one conflist this Configurator
    knows, by its name. Its conf is the conflist as loaded (type
    catalog.Conf; a value of it is named conf); every known network is
    catalog.Networks, and the network catalog (internal/catalog) holds
    them, the plugins and their backends, and the conflist files.
    In the exported API a network argument is a network's name. The
    default network is the one an Allocation that names none joins.
  - operation: one call of this package's API (Setup, Teardown,
    Connect, Disconnect, Check, Status, GC).
  - command: one CNI command a plugin runs (ADD, DEL, CHECK, STATUS, GC).
  - request: what the plugins are told about one allocation — its ID,
    port mappings, CNI args and capability arguments
    (attachments.Request, named req). It is the same for every command of the allocation,
    since portmap's DEL removes nothing unless it sees the same port
    mappings.
  - attachment: one allocation on one network, with its interface name
    (attachments.Attachment, named att). InterfaceStatus is what Setup
    learned about one.
  - found attachment: an attachment as found in the allocation and in
    libcni's cache, with the request it was made with
    (attachments.Found, named fa): what Teardown, Disconnect and Check
    act on, as attachments.Finder finds it.
  - footprint: what the plugins leave on the host for one attachment
    (rules, chains, reservations, cached results, devices), which the
    force cleanup and GC remove (internal/footprint).
  - registry: the host registry (Config.StateDir), shared by every
    process on the host that attaches workloads through cninet, and the
    locks they all honour (internal/registry; attachments.Registry is how
    the operations use it).
  - record: the registry's durable account of one attachment — its
    owner, conflist, args, port mappings, backends and every address it
    provably held — written before its ADD and, before any DEL, holding
    every proof its cleanup needs; removed when the cleanup found
    nothing left (Attachments lists them).
  - owner: whose attachments a Configurator makes (Config.Owner); a GC
    collects only its own owner's (and any owner's recorded in an
    earlier boot). A DEL of another owner's attachment whose namespace
    lives changes nothing (the namespace judged by internal/workload).
  - intent record: what cninet wrote before it had a registry, the
    addresses it withheld from a DEL; still read as proof, and removed
    with the attachment.
  - seam: an interface through which cninet reaches the host
    (host.IPTables, host.NFTables, host.Links), replaced by fakes in
    tests through Config (package cninettest).

# Files

In reading order, from the API down: each exported method of
Configurator is a short call into its operation, a type of its own
(attacher, connector, checker, prober; Teardown's is
attachments.Detacher, GC's gc.Collector) holding
only the parts it uses, built once by New (Configurator.wire); what
several operations share is a type in a file named after what it
holds. What the operations share about an allocation's attachments,
and the detach every one of them makes (Teardown's, a rollback's, GC's),
is package internal/attachments; GC is package internal/gc; the drift check's live attachments and
repairs, package internal/drift. No file uses a name of a file above it.

	doc.go                This overview.
	configurator.go       Configurator, New (its parts, then wire: the operations), Close, and every exported method of Configurator, each a short call into its operation.
	repairwatch.go        The repair watcher (Config.RepairEvery, internal/repairwatch) started with the checker's parts it uses (watchedParts).
	reload.go             The ConfDir watcher (Config.Watch): Reload once a burst of changes settles.
	telemetry.go          What internal/telemetry (the spans and metrics) is given of this package: the providers, error.type by sentinel (errorType), the known networks.
	config.go             Config (its seams are package host's: IPTables; an injected CNI's PluginAdder) and the defaults New applies.
	gc_report.go          GCOptions, GCAttachment, GCReport, GCItem, GCKind: what GC is asked, checked into internal/gc's Scope (gcScopeOf), and what it removed, from internal/gc's Report (gcReportOf).
	status.go             prober: Status (whether each network, or each one named, can attach workloads) and Unrecorded.
	connect.go            connector: Connect and Disconnect (ConnectOptions: the interface, the runtime's id).
	check.go              checker: Check and Drifts, CheckOptions, DriftError, Drift: cninet's own check of each attachment in one read of the host (driftCheck, with its repair), then the plugins' CHECK where it is sound.
	setup.go              attacher: Setup; attaching: attach every network concurrently, all or nothing, each ADD retried (withRetry), and the rollback.
	records.go            AttachmentRecord: the host registry's listing (Configurator.Attachments); WithOwner.
	retry.go              RetryPolicy: the ADD retries' attempts and back-off, and which errors no retry fixes.
	request.go            Requests: an Allocation checked into the request its plugins are told (attachments.Request), its CNI args and capability arguments (ValidateCapabilities, the Capability… names), CheckIfName; optionsOf.
	allocation.go         Allocation, Port, NetworkPorts, PortMappings.
	conflist.go           Conflists: LoadConfList, BridgeConfig, DefaultBridgeConfig, BridgeConfList, WriteConfList, the Backend… names (internal/catalog does the work).
	result.go             NetworkStatus, InterfaceStatus, DNSConfig, StatusFromResult.
	errors.go             The Err… sentinels every error wraps (those the internal packages wrap tied to their internal/errs kinds).
*/
