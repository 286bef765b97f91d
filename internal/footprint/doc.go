// Package footprint is everything cninet knows about what the CNI
// reference plugins leave on a host for one attachment, and how to prove
// who owns each piece. It imports nothing of cninet: data flows one way,
// from the caller down to the host.
//
// # One file per plugin and backend
//
// Each footprint is one file that holds its whole knowledge: the names and
// comments the plugin writes (pinned against the plugins' pkg/utils), how
// it proves that an attachment held an address, what it plans to delete,
// and what it discovers for a GC:
//
//	hostlocal.go          host-local's reservation files
//	libcnicache.go        libcni's cached results (empty or cut ones too)
//	bridge_iptables.go    the bridge (and ptp) plugin's masquerade jump and chain
//	bridge_nftables.go    the same with "ipMasqBackend": "nftables"
//	portmap_iptables.go   portmap's DNAT jump and chain (and legacy SNAT chain)
//	portmap_nftables.go   portmap's bare-id rules with "backend": "nftables"
//	firewall.go           the firewall plugin's comment-less CNI-FORWARD rules
//	bandwidth.go          the bandwidth plugin's ifb device
//	tuning.go             the tuning plugin's saved interface settings
//	withheld.go           cninet's own intent records (see the prevention rule)
//
// Each also knows what must be there while an attachment lives (expect,
// see "What must be there" below), and names what the views must read
// for it: the iptables chains (iptReader: the shared chains every run
// lists, the chains a drift check reads, the prefixes of the chains it
// names after an attachment), the nftables tables and chains and how to
// tell its rules in them apart (nftReader). The views build their lists
// from the footprints, in their order, and name no plugin's. Adding a
// plugin is one such file and one line in footprints (pipeline.go).
// NetworkOf (attachment.go) reads from a conflist which of them a
// network's attachments can leave.
//
// # One pipeline
//
// Teardown and GC run the same pass over different sets of attachments
// (network and container id), in one direction:
//
//	read the host   view.go, iptview.go, nftview.go, files.go: every
//	                listing, dump and file read at most once
//	evidence        pipeline.go: which addresses the set provably held,
//	                and which of those others hold now (a value)
//	plan            plan.go: deletions (a value)
//	apply           apply_iptables.go, apply_nftables.go, apply_files.go:
//	                one batched applier per backend (and ifb devices)
//	report          exactly what was removed
//
// A Teardown reads only what its attachment can own. Where the kernel
// keeps the tables in nf_tables, it first asks over netlink (package
// nfnetlink, through the optional extensions of host.IPTables and
// host.NFTables): whether the chains derived from the id exist, whether a
// shared chain has a rule mentioning a proven address or carrying one of
// the attachment's comments. Those probes only rule things out: whatever
// they cannot rule out is listed with iptables or nft and judged by the
// ownership rule below, exactly as without them. Before portmap's DEL, the
// rules of the id are searched by comment in the chains that DEL reads,
// and nowhere else (foreignIDRules, host.NFTRuleFinder); the default
// NFTables answers that, and the scans, from a copy of the plugins'
// tables that nf_tables' notifications keep current, so that nothing of
// the kernel is read while nothing changed. A clean Teardown
// starts no process. A GC lists whole tables once and shares them among all ids.
//
// Applying is batched per backend. Where the tables are nf_tables', the
// planned deletions go by rule handle over netlink (host.HandleDeleter,
// host.NFTHandleDeleter): each planned rule is matched on a fresh dump of
// its chain (position, comment, addresses), deleted in an acked batch
// that the kernel refuses if the ruleset changed since that dump, and
// reported only when acked. What does not match exactly goes through
// iptables-restore, which deletes by content; nothing else is ever
// deleted in its place.
//
// The host is reached only through Seams (host.IPTables, host.NFTables,
// host.Links and the file system); packages iptables, nftables,
// nfnetlink and links hold the defaults and the listing parsers.
//
// # The ownership rule
//
// Nothing is deleted unless it provably belongs to an attachment being
// cleaned, identified by its network name N and container id ID:
//
//   - A rule whose comment names exactly N and ID is the attachment's. "id:
//     \"ab\"" never matches "id: \"abc\"". iptables keeps only the first 255
//     bytes of a comment, so two attachments with long ids can share a cut
//     comment; such a rule counts only together with its jump target, which
//     the plugins derive from sha512(N+ID) of the whole id.
//   - A chain, or an ifb device, is the attachment's only under a name the
//     plugins derive from N and ID.
//   - A rule that names no network — the firewall plugin's rules carry no
//     comment at all, portmap's nftables rules only the bare id — is the
//     attachment's only when its address is one the attachment provably
//     held (its own masquerade rule, host-local reservation or cached
//     result names it; for portmap's, with the rule's id) and no other
//     attachment holds that address now.
//   - Another attachment holds an address now when, on any network the
//     caller knows (Host.Networks), its host-local reservation names the
//     address, its cached result names it, its masquerade rule (iptables
//     or nftables) names it, or a hostport rule of its id maps to it. A
//     Teardown reads the other attachments' cached results only for an
//     address host-local did not reserve for the attachment itself: host-local
//     gives an address to one attachment of a network at a time.
//   - A reservation file is the attachment's when it names ID as its holder
//     in N's IPAM directory, re-read under host-local's lock just before it
//     is removed; a cached result when libcni recorded it for N and ID (an
//     empty or cut one, when its file name reads as N, ID and one of N's
//     interface names in exactly one way); a tuning file when it names ID
//     and an interface of N, in a tuning directory of N.
//
// Anything else is left alone.
//
// # The prevention rule
//
// Some plugins' DEL deletes by something other than the attachment's own
// identity: the firewall plugin by the addresses of the cached result
// (stale after a reboot that kept libcni's cache but not host-local's
// reservations), portmap's nftables backend by the bare id, on every
// network. No such DEL is run as it is: before it, Prevent (prevent.go)
// records every address the attachment's files prove in the proof store
// (Seams.Proofs: cninet's host registry), since the DEL erases those
// files; withholds from the cached result every address the attachment
// does not provably still own — without a proof store, recording them
// first in an intent record (withheld.go), each write atomic — and
// leaves portmap out of the DEL
// where rules of the same id belong to another attachment. How the
// detach is made (Detach: the workload keeps other attachments, the
// caller named the attachment exactly, lo was up) decides the rest in the
// same place: portmap left out alongside other networks, unless the host
// holds only this attachment's hostport rules of the id; portmap's DEL
// run once first for a whole workload leaving several networks; the
// loopback plugin left out while the workload keeps lo. The force
// cleanup then removes what the DEL did not see, by the ownership rule.
// What belongs to a live attachment is never removed, at any instant,
// whatever process dies when, and nothing is ever added back.
//
// # What must be there
//
// A live attachment's footprint is known twice. From the same files,
// each footprint says what its plugin wrote for the attachment and must
// still be there (expect): the rules and chains, the shared chains and
// jumps they hang from, the reservation, the cached result; health.go
// adds the workload's namespace, interface and addresses and the host's
// end of its veth. A Checker reads the host once (liveView) for every
// attachment it is given, and Health names each missing piece with how
// a repair restores it: the plugin's own ADD (portmap, firewall: both
// add a rule only where it is missing; portmap's nftables backend adds
// without looking, so what is left of the attachment's own rules goes
// first), cninet writing it as the plugin or its library does (the
// masquerade rules, host-local's reservation, libcni's cache), or not at
// all in place (a device, the namespace, an address another attachment
// holds now). Nothing of another attachment is deleted or changed.
//
// # Files, in reading order
//
//	doc.go                this overview
//	attachment.go         Attachment (network and container id) and the
//	                      names the plugins derive from it; NetworkOf:
//	                      which footprints a network can leave
//	cleaner.go            Network, Seams, ProofStore, Cleaner: NewCleaner for a Teardown,
//	                      NewSweep for a GC; Discover, Clean, CleanAll;
//	                      TakeSpent: each phase's host work (package hostwork);
//	                      a GC's pass over every family at once
//	pipeline.go           the footprint interface, claims and evidence;
//	                      who holds an address now
//	health.go             Live (a live attachment as its record tells
//	                      it), Checker, Health, Missing: what must be
//	                      there while it lives; the workload's devices
//	liveview.go           the host as one drift check reads it, for
//	                      every attachment at once; rules as the plugins
//	                      write them, looked up in iptables' listings,
//	                      each chain indexed once
//	restore.go            Checker.Repair: what is missing restored in
//	                      place, by the plugins' ADD or as they write it;
//	                      PlanRules, RestoreRules: many attachments'
//	                      iptables rules in one restore per table
//	view.go               what one pass read of the host, read once
//	iptview.go            iptables listings, probed or listed, per family;
//	                      iptReader: the chains the footprints name
//	nftview.go            nftables listings, sketched, searched by
//	                      comment or listed; nftReader: the tables and
//	                      chains the footprints name
//	nftseen.go            what Prevent saw of the set's nftables rules,
//	                      looked up by handle after the DEL
//	files.go              reservations, cached results, tuning files and
//	                      intent records as read for one pass
//	hostlocal.go          host-local's reservations (footprint)
//	hostfiles_linux.go    host-local's directory lock, taken as it does;
//	                      a file created whole (CreateWhole)
//	hostfiles_other.go    the same off Linux: no lock, plain creates
//	libcnicache.go        libcni's cached results (footprint)
//	bridge_iptables.go    the bridge's masquerade jump and chain (footprint)
//	bridge_nftables.go    the same with "ipMasqBackend": "nftables"
//	portmap_iptables.go   portmap's DNAT jump and chains (footprint)
//	portmap_nftables.go   portmap's bare-id nftables rules (footprint);
//	                      before its DEL, the id's rules searched where
//	                      that DEL reads (foreignIDRules)
//	firewall.go           the firewall plugin's CNI-FORWARD rules (footprint)
//	bandwidth.go          the bandwidth plugin's ifb device (footprint)
//	tuning.go             the tuning plugin's saved settings (footprint)
//	withheld.go           cninet's intent records (footprint)
//	prevent.go            Prevent, Prevention: what a DEL must not see,
//	                      before it runs, as the host and how the detach
//	                      is made (Detach) require; PluginFilter: which
//	                      plugins of the chain the DEL runs
//	plan.go               the plan of deletions, and when files must stay
//	apply_iptables.go     deletions by handle, then iptables-restore
//	apply_nftables.go     deletions by handle, then one nft transaction
//	apply_files.go        files removed under host-local's lock; devices
//	report.go             Report and Item: exactly what was removed
package footprint
