// Package cninet gives a workload's network namespace CNI networking the way
// an orchestrator's allocation runner needs it: load or generate a conflist,
// attach the namespace with port mappings, report the address, and detach it
// again without leaving iptables rules, chains or IP reservations behind.
//
// Build one Configurator with New, from conflist bytes (BridgeConfList
// generates the default bridge network; Config.ConfLists adds more) or
// from a directory (every network in it is known; Config.NetworkName is
// the default). Then, per workload:
//
//   - Setup attaches the namespace and returns its address. An Allocation
//     joins the networks its NetworkNames lists, in order, as eth0, eth1,
//     …, or the default network; the networks attach concurrently and
//     NetworkStatus.Networks has each network's addresses in the
//     allocation's order. Failed ADDs are retried per Config.Retry, with
//     a DEL and a force cleanup in between; a Setup that fails leaves
//     nothing behind, in any network.
//   - Connect attaches a live workload to one more network (the lowest
//     free interface name), Disconnect detaches it from one, leaving the
//     others.
//   - Teardown detaches it: CNI DEL with the same port mappings and args,
//     then a force cleanup of everything the plugins are known to leave (the
//     bridge's masquerade rules, portmap's DNAT rules and chains, the
//     firewall plugin's rules, host-local's reservations, libcni's cache),
//     for IPv4 and IPv6, with the plugins' iptables and nftables backends.
//     Its cost follows what one attachment can own, not the host's
//     ruleset. It is idempotent.
//   - Check verifies an attachment after a runner restart.
//
// Teardown and Check act on every network the allocation joined, those
// added with Connect included (libcni's cache knows them). GC
// removes every attachment, in every known network, whose allocation is
// not live; Status reports whether each network can attach workloads; and
// Reload (or Config.Watch) picks up changed conflists.
//
// The default network, as a workload's first interface, is attached
// through go-cni (or Config.CNI); every other network and position
// through libcni directly, on the same plugin and cache directories.
//
// Cleanup deletes only what provably belongs to the attachment: rules whose
// comment names exactly its network and id, chains under the names the
// plugins derive from them, and rules that name no network (the firewall
// plugin's, portmap's nftables rules) only for an address the attachment's
// own rules or files prove it held and nobody else holds now. The rule in
// full is in the documentation of internal/footprint.
//
// Calls for one allocation ID are serialised; calls for different IDs run
// in parallel. Every error wraps one of the exported Err… sentinels and
// keeps its cause: test them with errors.Is.
package cninet
