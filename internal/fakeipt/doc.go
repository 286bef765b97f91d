// Package fakeipt emulates iptables-legacy for the tests of cninet's
// iptables runner: its commands, answered from the in-memory tables of
// cninettest/fakes, and the xtables lock, held or let go by the test.
//
// # Files
//
//	legacy.go    Legacy: iptables-legacy's commands and xtables lock emulated
package fakeipt
