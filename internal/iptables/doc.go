// Package iptables is cninet's default host.IPTables and what reads its
// output: go-iptables plus the optional extensions, run against the
// host's iptables binaries, and the parser of `iptables -S` and
// iptables-save listings that footprint judges rules by.
//
// New opens one family. On iptables-legacy every listing and change
// takes the xtables lock, waited for no longer than the caller's context
// allows (lock.go); on iptables-nft the tables are nf_tables tables, so
// chains are probed, rules scanned and planned deletions done by handle
// over netlink (on_nftables.go, handles.go, through package nfnetlink)
// without starting a process.
//
// # Files, in reading order
//
//	tables.go        Opener (each family opened once per Configurator),
//	                 BindContext, IsNotExist: what absence looks like
//	iptables.go      New, the default IPTables: commands under a context,
//	                 iptables-save and iptables-restore; NewEmulated for
//	                 tests that emulate the binaries
//	lock.go          the xtables lock: -w from a deadline, ErrXtablesLock
//	                 errors naming the holder
//	lock_linux.go    who holds the lock, from /proc/locks
//	lock_other.go    the same off Linux: nobody known
//	on_nftables.go   iptables-nft: chain probes and address scans over
//	                 netlink, and noticing a switch of binaries
//	handles.go       HandleDeleter on iptables-nft: a listed rule deleted by
//	                 its nf_tables handle only when it is exactly as listed
//	write.go         RuleWriter: what a repair writes, go-iptables' calls
//	                 run as the other commands are; iptables-nft's chain
//	                 probe
//	listing.go       Rule and Listing: `iptables -S` lines parsed into the
//	                 substrings ownership reads, kept compactly for sweeps
//	stream.go        SaveEach: iptables-save read as a stream, line by line
package iptables
