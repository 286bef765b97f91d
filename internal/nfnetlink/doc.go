// Package nfnetlink is a small nf_tables netlink client: it probes a
// chain by name, looks up a rule by handle, scans the rules of a table or chain without decoding
// them into text, lists a table's rules with the addresses nft would list
// for them (Rule.Addrs), lists tables, and deletes rules by handle and chains
// by name in acked batches at the generation of the dump they were
// matched on. Packages iptables (for iptables-nft), nftables and
// footprint (its address scans of rule sketches) use it; nothing here
// knows the plugins.
//
// # Files, in reading order
//
//	nfnetlink.go   messages and dumps: Rule, ProbeChain's, LookupRule's,
//	               AnyRule's and ListRules' requests, parsing what the
//	               kernel answers
//	decode.go      Rule.Addrs: the addresses of a rule's expressions, as
//	               nft lists them
//	batch.go       Target, DeleteRules, DeleteChains: matching planned
//	               deletions on a fresh dump, batching, settling each ack
//	write.go       batch framing and sending; the table listing
//	conn_linux.go  the socket, kept for the next question or batch from
//	               the same network namespace (closing one waits for
//	               nf_tables' commit mutex), and the exported calls
//	               (ProbeChain, LookupRule, AnyRule, ListRules, DeleteRules,
//	               DeleteChains, ListTables) that take one each
//	conn_other.go  the same calls off Linux: an error
package nfnetlink
