// Package fakeipt emulates iptables-legacy for the tests of cninet's
// iptables runner: its commands (listings, deletions, and the writes of a
// repair: -C, -N, -A, -I), answered from the in-memory tables of
// cninettest/fakes with iptables' exit statuses, and the xtables lock,
// held or let go by the test.
//
// # Files
//
//	legacy.go    Legacy: iptables-legacy's commands and xtables lock emulated
package fakeipt
