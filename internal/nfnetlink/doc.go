// Package nfnetlink is a small nf_tables netlink client: it probes a
// chain by name, looks up a rule by handle, scans the rules of a table or
// chain without decoding them into text, finds the rules of a chain by
// comment (reading a rule's comment before anything else of it), lists
// a table's rules with the addresses, ports and verdicts nft would list
// for them (Rule.Addrs, Rule.Decode), lists
// tables, deletes rules by handle and chains by name in acked batches at
// the generation of the dump they were matched on, and signals each
// removal from the ruleset (WatchChanges), and keeps a copy of a few
// tables' rules current by the same notifications (Mirror). Packages iptables (for iptables-nft), nftables and
// footprint (its address scans of rule sketches) use it; nothing here
// knows the plugins.
//
// # Files, in reading order
//
//	nfnetlink.go   messages and dumps: Rule, ProbeChain's, LookupRule's,
//	               AnyRule's, FindRules', ListRules' and EachRule's
//	               requests, parsing what the kernel answers
//	decode.go      Rule.Decode and Rule.Addrs: the addresses, destination
//	               port, DNAT port and verdict of a rule's expressions, as
//	               nft lists them
//	batch.go       Target, DeleteRules, DeleteChains: matching planned
//	               deletions on a fresh dump, batching, settling each ack
//	write.go       batch framing and sending; the table listing
//	conn_linux.go  the socket, kept for the next question or batch from
//	               the same network namespace (closing one waits for
//	               nf_tables' commit mutex), and the exported calls
//	               (ProbeChain, LookupRule, AnyRule, FindRules, ListRules,
//	               EachRule, DeleteRules, DeleteChains, ListTables) that
//	               take one each
//	watch.go       the change notifications read: each that may remove
//	               something a signal (a deletion, a cut datagram, an
//	               overrun), never waiting for the reader
//	watch_linux.go WatchChanges: a socket in nf_tables' multicast group,
//	               read through Go's poller, closed with its context
//	mirror.go      Mirror: a copy of some tables' rules, read once by
//	               dumps and kept current by the notifications, that
//	               answers FindRules' and AnyRule's questions without
//	               the kernel encoding a rule; why it is exact when asked
//	mirror_linux.go OpenMirror: the subscription, read without waiting
//	conn_other.go  the same calls off Linux: an error
package nfnetlink
