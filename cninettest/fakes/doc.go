// Package fakes holds in-memory stand-ins for everything cninet reaches
// on the host, for tests: the seams of package host (iptables, nftables,
// network devices) and go-cni's cni.CNI. Each records the calls it gets
// and can be told to fail; none needs root or changes the host.
//
// Host bundles one of each seam, with methods that fit cninet.Config
// (IPTables, NFTables, Links). CNI, given a Host, emulates the plugins of
// the conflist it is loaded with: it hands out addresses as host-local
// does and writes the rules bridge, portmap and firewall write (a
// Footprint per address) and the devices the bridge plugin makes (the
// bridge, and the workload's interface with its addresses in Links by
// namespace path), and its Remove takes them back as their DEL does, or,
// with LeakOnRemove, leaves them for cninet's cleanup to find.
// Package cninettest wires all of it into a ready Config.
//
// IPTables answers List, Delete and ClearAndDeleteChain as the iptables
// command does (it refuses to delete a chain still jumped to), and the
// writes of a repair (host.RuleWriter); Batching, Saving and NewProbing
// add the optional extensions the host's iptables has. NFTables answers
// as nft does (a transaction naming a rule already gone fails whole),
// runs the scripts knftables renders (RunScript) and signals each change
// (WatchChanges); FlushTable and FlushRuleset stand for a foreign change,
// a firewall reload. Matching adds the netlink matcher, search by comment
// and lookup by handle. Links holds the host's devices and, by namespace
// path (AddIn), workloads' interfaces with their addresses. seams.go
// lists every seam and extension each fake offers, checked by the
// compiler (CNI's cninet.PluginAdder in cninet's
// own tests, since this package imports nothing of cninet).
//
// # Files
//
//	host.go            Host: both families' iptables, nftables and devices; Dump, Leftovers
//	iptables.go        IPTables: the tables, the fake calls, failures; Batching, Saving, Probing
//	iptables_write.go  IPTables' RuleWriter: ChainExists, NewChain, Exists, Append, Insert
//	rulespec.go        FormatRule: a rule specification as iptables -S prints it
//	nftables.go        NFTables: the tables, the fake calls, failures, change signals; Matching
//	nftscript.go       NFTables' RunScript: the subset of nft scripts knftables renders
//	links.go           Links: the host's network devices, and workloads' by namespace path
//	seams.go           every seam and extension each fake offers, checked by the compiler
//	cni.go             CNI: canned results, scripted failures, recorded calls, the plugins' ADD and DEL
//	plugins.go         what the emulated plugins read of the conflist, host-local's reservations, libcni's cache
//	footprint.go       Footprint: the rules bridge, portmap and firewall write for one address; SharedNAT, SharedFilter
package fakes
