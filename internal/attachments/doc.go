// Package attachments is what cninet's operations share about an
// allocation's attachments, and the one detach every operation makes:
//
//   - Request: what the plugins are told (from an Allocation, libcni's
//     cache or a record); Attachment and Found: one network of a workload,
//     as named and as found.
//   - Finder: an allocation's attachments, from its networks, the host
//     registry and libcni's cache.
//   - Registry: the host registry as the operations use it (records,
//     proofs, the locks every process honours) and Owners (WithOwner).
//   - Drivers: how one network's plugins run (go-cni or libcni), a DEL
//     restricted to the plugins footprint.PluginFilter lets run.
//   - Seams: how a cleanup reaches the host.
//   - Detacher and Detachment: Teardown, and every other detach, in one
//     pass: how the detach is made, prevention, DEL, force cleanup, the
//     record forgotten.
//
// Package cninet builds these parts once (New) and hands each operation
// the ones it uses; nothing here knows the Configurator.
//
// Files, from the operations down:
//
//	doc.go         This overview.
//	teardown.go    Detacher (Teardown), Detachment: one detach of found attachments; WhileLockHeld, EachNetwork, LogFound.
//	loopback.go    KeepLoopback: the workload's lo kept up through the DELs of a detach that leaves it other networks.
//	finder.go      Finder: an allocation's attachments, from its request, the registry and libcni's cache.
//	seams.go       Seams: how a cleanup reaches the host, and what it must know of each network.
//	driver.go      Drivers, NetDriver: go-cni's and libcni's; a DEL by plugin filter, one plugin's ADD for a repair.
//	records.go     Registry: records, proofs, locks; Owners and WithOwner: whose an operation's attachments are.
//	unreadable.go  Registry files this cninet cannot read: kept, their attachments left alone.
//	result.go      The result an injected Config.CNI returned, rebuilt (rawResult); every address of a result.
//	attachment.go  Attachment, Found; IfNaming: a workload's interface names.
//	request.go     Request: what the plugins are told; as libcni cached it, or a record says.
package attachments
