//go:build !linux

package cninet

import (
	"fmt"
	"net/netip"
	"os"
)

// checkNetNS fails, wrapping ErrNoNetNS, when path does not exist; only
// Linux can tell a network namespace from other files.
func checkNetNS(path string) error {
	if _, err := os.Stat(path); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrNoNetNS, path, err)
	}
	return nil
}

// netnsInode is 0 off Linux: no namespace is known by its inode.
func netnsInode(string) uint64 { return 0 }

// netnsStillHolds is false off Linux: no DEL enters a recorded namespace.
func netnsStillHolds(string, uint64, string, []netip.Addr) bool { return false }
