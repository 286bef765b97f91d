package iptables

import (
	"fmt"
	"testing"
)

// TestIsNotExistReadsIPTablesWordsForAbsenceOnly feeds IsNotExist what
// iptables 1.8.9 (nf_tables and legacy) printed, in go-iptables' wrapping.
func TestIsNotExistReadsIPTablesWordsForAbsenceOnly(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stderr string
		absent bool
	}{
		{"nf_tables: -S of a chain that does not exist", "iptables v1.8.9 (nf_tables): chain `NOPE' in table `nat' is incompatible, use 'nft' tool.\n", true},
		{"legacy: -S or -X of a chain that does not exist", "iptables: No chain/target/match by that name.\n", true},
		{"nf_tables: -D of a rule in a chain that does not exist", "iptables v1.8.9 (nf_tables): Chain 'NOPE' does not exist\nTry `iptables -h' or 'iptables --help' for more information.\n", true},
		{"either: -D of a rule that does not exist", "iptables: Bad rule (does a matching rule exist in that chain?).\n", true},
		{"nf_tables: a chain holding rules only nft can read", "Error: meta sreg key not supported\niptables v1.8.9 (nf_tables): Parsing nftables rule failed\nPerhaps iptables or your kernel needs to be upgraded.\n", false},
		{"the xtables lock held too long", "Another app is currently holding the xtables lock. Stopped waiting after 5s.\n", false},
		{"not root", "iptables v1.8.9 (nf_tables): Could not fetch rule set generation id: Permission denied (you must be root)\n", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := fmt.Errorf("running [iptables -t nat -S NOPE --wait]: exit status 1: %s", tc.stderr)
			if got := IsNotExist(err); got != tc.absent {
				t.Errorf("IsNotExist = %v, want %v", got, tc.absent)
			}
		})
	}
}

// notExistError is go-iptables' error as it reads a message with "No such
// file or directory" in it: absent.
type notExistError struct{ msg string }

func (e notExistError) Error() string { return e.msg }

func (e notExistError) IsNotExist() bool { return true }
