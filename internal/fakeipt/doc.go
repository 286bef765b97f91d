// Package fakeipt is an in-memory iptables for tests. It holds rules as
// `iptables -S` prints them, answers List, Delete and ClearAndDeleteChain
// the way the real command does (including refusing to delete a chain that
// is still jumped to), records every call, and can be told to fail.
//
// # Files
//
//	fakeipt.go   IPTables: the tables, the fake calls, failures, Batching
//	legacy.go    Legacy: iptables-legacy's commands and xtables lock emulated
package fakeipt
