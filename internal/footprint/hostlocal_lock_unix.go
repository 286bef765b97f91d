//go:build unix

package footprint

import (
	"os"
	"path/filepath"
	"syscall"
)

// lockDir takes host-local's lock on a network's reservation directory (an
// flock on the file "lock" in it), creating the file as host-local would.
func lockDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { f.Close() }, nil
}
