// Package repairwatch is the repair watcher (cninet's Config.RepairEvery):
// it keeps the live attachments of an owner whole by itself. A pass checks
// them all in one read of the host and repairs each that lacks something,
// under its lock, only while its record says attached. A pass runs at
// start, every interval, and at once when the nf_tables ruleset changes
// (every change by nft, iptables-nft or firewalld arrives as a netlink
// notification; a burst is one pass). It never fights: an attachment
// repaired maxRepairs times within fightWindow is reported and left alone
// until the window has passed, and repairs that leave pieces missing back
// off.
//
// The watcher reaches the Configurator only through Parts, an interface
// listing what it uses: the host registry's records and locks, a check of
// the host (a *footprint.Checker), and telemetry. Each attachment carries
// its own repair (the Configurator's: its plugins' ADD, libcni's cache).
//
// Files:
//
//	doc.go      This overview.
//	parts.go    Parts (Registry, Firewall, Telemetry), Read, Checker, Attachment: what the watcher uses.
//	watcher.go  Config, Watcher, its pacing; New, Start, Stop; the loop: passes at start, on the interval and on change signals (debounced), again soon after a held id; subscribe.
//	pass.go     A pass: the live attachments from the registry, one check, whether the firewall need be read again, those drifting and not held.
//	repair.go   The repairs of a pass: one read for them all, the first alone, the rest a few at once, each under its lock; one check of those repaired.
//	ledger.go   Never fight: the fight limit, back-off, what is reported once; account; forgetGone.
//	outcome.go  What a repair did (Restored) and its log line (LogRepair), the watcher's and Check's alike.
package repairwatch
