//go:build !linux

package workload

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
)

// CheckNetNS fails when path does not exist; only Linux can tell a
// network namespace from other files.
func CheckNetNS(path string) error {
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// Inode is 0 off Linux: no namespace is known by its inode.
func Inode(string) uint64 { return 0 }

// StillHolds is false off Linux: no DEL enters a recorded namespace.
func StillHolds(string, uint64, string, []netip.Addr) bool { return false }

// netnsAt cannot tell a network namespace off Linux.
func netnsAt(string) (uint64, error) { return 0, errors.ErrUnsupported }

// netnsAbsent is false off Linux: no namespace is ever proven gone.
func netnsAbsent(error) bool { return false }

func ownNetns() uint64 { return 0 }

func heldNetns() map[uint64]bool { return nil }
