// Package fakenft is an in-memory nftables for tests: it holds rules as
// cninet's cleanup sees them (loaded from real `nft -j` captures or built by
// hand), answers ListRules and DeleteRules the way the host's nft does —
// a transaction that names a rule already gone fails whole — records every
// call, and can be told to fail.
//
// # Files
//
//	fakenft.go   NFTables: the tables, the fake calls, failures
package fakenft
