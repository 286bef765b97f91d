// Package nftables is cninet's default host.NFTables: `nft -j` for the
// listings whose addresses ownership reads, netlink (package nfnetlink)
// for the list of tables, in-process rule scans and deletions by handle.
//
// ParseListing shares one copy of each name ShareNames was given among
// all the rules it reads; package footprint gives it the plugins' family,
// table and chain names when it is initialized.
//
// # Files, in reading order
//
//	nftables.go   New and Opener (opened once per Configurator), listings,
//	              AnyRule's in-process scan
//	handles.go    DeleteByHandle: a listed rule deleted by handle only
//	              while it is still the rule listed; DeleteRules
//	listing.go    ParseListing: `nft -j` output read as a stream into
//	              host.NFTRule values, names and comments shared
package nftables
