//go:build unix

package registry

import (
	"fmt"
	"os"
	"syscall"
)

// tryLockFile takes the flock of the file at path, creating it, unless
// another holds it (ErrBusy). With removeOnUnlock the file is removed
// when the lock is released, while still held, so no lock file outlives
// its use.
// lockOpened, when a test sets it, is called between opening a lock file
// and locking it: where a releasing holder may remove the file.
var lockOpened func(path string)

func tryLockFile(path string, exclusive, removeOnUnlock bool) (func(), error) {
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		if lockOpened != nil {
			lockOpened(path)
		}
		if err := syscall.Flock(int(f.Fd()), how|syscall.LOCK_NB); err != nil {
			f.Close()
			if err == syscall.EWOULDBLOCK {
				return nil, fmt.Errorf("lock %s: %w", path, ErrBusy)
			}
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		// The holder before us may have removed the file after we opened
		// it: then our lock is on a file nobody else will find.
		if same, err := samePath(f, path); err != nil || !same {
			f.Close()
			if err != nil && !os.IsNotExist(err) {
				return nil, fmt.Errorf("lock %s: %w", path, err)
			}
			continue
		}
		return func() {
			if removeOnUnlock {
				os.Remove(path)
			}
			f.Close() // releases the lock
		}, nil
	}
}

func samePath(f *os.File, path string) (bool, error) {
	held, err := f.Stat()
	if err != nil {
		return false, err
	}
	now, err := os.Stat(path)
	if err != nil {
		return false, err
	}
	return os.SameFile(held, now), nil
}
