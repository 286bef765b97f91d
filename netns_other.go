//go:build !linux

package cninet

import (
	"fmt"
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
