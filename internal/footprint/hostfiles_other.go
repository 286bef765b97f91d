//go:build !linux

package footprint

import (
	"context"
	"os"
)

// lockDir is a no-op where host-local does not run.
func lockDir(context.Context, string) (func(), error) { return func() {}, nil }

// CreateWhole creates path holding body, only where no file is: an
// exclusive create and a write (see the Linux one).
func CreateWhole(path string, body []byte, mode os.FileMode) error {
	return createExclusive(path, body, mode)
}
