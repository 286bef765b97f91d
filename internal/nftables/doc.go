// Package nftables is cninet's default host.NFTables: netlink (package
// nfnetlink) for the list of tables, the listings whose addresses
// ownership reads (decoded in-process, as nft would list them, with the
// ports and verdicts a drift check reads), rule scans, lookups and
// deletions by handle, and the change notifications a repair watcher
// waits on; `nft -j` only where netlink cannot list a table, and `nft -f`
// for the scripts a repair runs. nft reads the host's whole ruleset to list one table, so its
// cost grows with every other rule on the host.
//
// ParseListing shares one copy of each name ShareNames was given among
// all the rules it reads; package footprint gives it the plugins' family,
// table and chain names when it is initialized.
//
// # Files, in reading order
//
//	nftables.go   New and Opener (opened once per Configurator, closed with
//	              it: the copy of the rules released), listings
//	              over netlink (nft -j as the fallback), AnyRule's
//	              in-process scan and FindRules' search of chains by
//	              comment (both from the copy of the rules nf_tables'
//	              notifications keep, nfnetlink.Mirror, where it can
//	              answer; NewWithoutCopy asks the kernel every time),
//	              LookupRule's one rule by handle
//	handles.go    DeleteByHandle: a listed rule deleted by handle only
//	              while it is still the rule listed; DeleteRules
//	listing.go    ParseListing: `nft -j` output read as a stream into
//	              host.NFTRule values (addresses, ports, verdicts), names
//	              and comments shared; ruleChunks, which holds a listing
//	              without copying it as it grows
//	script.go     RunScript: `nft -f -`, bounded by a context
//	watch.go      WatchChanges: nf_tables' change notifications
package nftables
