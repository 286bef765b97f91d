// Package host holds the seams through which cninet reaches the host's
// firewall and network devices: the interfaces Config.IPTables,
// Config.NFTables and Config.Links take, their optional extensions
// (what cleanup reads and deletes with, and what a drift check reads and
// a repair writes with), and the values and errors that cross them. cninet's defaults implement
// them against the real host; a test replaces any of them with a fake
// (package cninettest/fakes has fakes of exactly these interfaces, which
// cninet's own tests use too), and
// an orchestrator may wrap one, for instance to log or to rate-limit.
//
// An optional extension is found with a type assertion on the value
// given. Without one, cleanup lists and deletes the same things the slow
// way (ContextBinder aside, which bounds commands by a context), so a
// fake needs only the base interface, and a wrapper that hides an
// extension makes cleanup slower, never wrong. The drift seams are the
// exception: without RuleWriter or NFTScriptRunner a repair cannot write
// what cninet writes itself, without LinkInspector devices are not
// checked, and without NFTChangeWatcher the repair watcher waits for its
// next periodic check; each says so rather than guess.
//
// Nothing here changes the host by itself; the package imports nothing
// of cninet.
//
// # Files
//
//	iptables.go   IPTables, its eleven optional extensions (RuleWriter: what
//	              a repair writes; NFTablesBacked: whose changes the repair
//	              watcher is told of), ListedRule, ErrXtablesLock,
//	              ErrIPTablesMissing, DefaultLockWait
//	nftables.go   NFTables, NFTable and NFTChain, NFTRule (addresses,
//	              ports, verdict), its optional extensions (NFTRuleMatcher,
//	              NFTRuleFinder, NFTRuleLookup for cleanup; NFTScriptRunner
//	              and NFTChangeWatcher for repairs) and NFTRuleSketch,
//	              ErrNFTablesMissing
//	handles.go    HandleOutcome: what became of a deletion by rule handle
//	links.go      Links, the host's network devices, and LinkInspector
//	              with LinkInfo: what a drift check reads of them
package host
