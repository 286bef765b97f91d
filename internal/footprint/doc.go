// Package footprint is everything cninet knows about what the CNI
// reference plugins leave on a host for one attachment, and how to prove
// who owns each piece. One file per plugin and backend says how the plugin
// names and comments its state, formatting and recognising side by side:
//
//	bridge_iptables.go    the bridge plugin's masquerade jump and chain
//	portmap_iptables.go   portmap's DNAT jump and chain (and legacy SNAT chain)
//	firewall.go           the firewall plugin's comment-less CNI-FORWARD rules
//	hostlocal.go          host-local's reservation files
//	libcnicache.go        libcni's cached results
//
// The Cleaner removes the footprint of a set of attachments of one network
// in four steps: scan (listings and files, each read once), evidence (which
// addresses each attachment provably held, which ones other attachments
// hold now), plan (the deletions each footprint asks for), apply (batched
// where the host allows).
//
// A Teardown scans only what one attachment can own. Where the kernel
// keeps the tables in nf_tables, it first asks over netlink
// (nfnetlink*.go): whether the chains derived from the id exist, whether a
// shared chain has a rule mentioning a proven address or carrying one of
// the attachment's comments. Those probes only rule things out: whatever
// they cannot rule out is listed with iptables or nft and judged by the
// ownership rule below, exactly as without them.
//
// Applying is batched per backend. Where the tables are nf_tables', the
// planned deletions go by rule handle over netlink (nfnetlink_batch.go):
// each planned rule is matched on a fresh dump of its chain (position,
// comment, addresses), deleted in an acked batch that the kernel refuses
// if the ruleset changed since that dump, and reported only when acked.
// What does not match exactly goes through iptables-restore, which deletes
// by content; nothing else is ever deleted in its place.
//
// # The ownership rule
//
// Nothing is deleted unless it provably belongs to the attachment being
// cleaned, identified by its network name N and container id ID:
//
//   - A rule whose comment names exactly N and ID is the attachment's. "id:
//     \"ab\"" never matches "id: \"abc\"". iptables keeps only the first 255
//     bytes of a comment, so two attachments with long ids can share a cut
//     comment; such a rule counts only together with its jump target, which
//     the plugins derive from sha512(N+ID) of the whole id.
//   - A chain is the attachment's only under a name the plugins derive from
//     sha512(N+ID).
//   - A rule that names no network — the firewall plugin's rules carry no
//     comment at all — is the attachment's only when its address is one the
//     attachment provably held (its own masquerade rule, host-local
//     reservation or cached result names it) and no other attachment holds
//     that address now: host-local may already have handed it to a new
//     workload, whose rules look exactly the same.
//   - A reservation file is the attachment's when it names ID as its holder
//     in N's IPAM directory, re-read under host-local's lock just before it
//     is removed; a cached result when libcni recorded it for N and ID.
//
// Anything else is left alone.
package footprint
