//go:build unix

package footprint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// lockPoll is how often a held host-local lock is tried again.
const lockPoll = 10 * time.Millisecond

// lockDir takes host-local's lock on a network's reservation directory (an
// flock on the file "lock" in it, created as host-local would), waiting
// for it no longer than ctx allows: a plugin stuck holding it must not
// hang a Teardown past its deadline.
func lockDir(ctx context.Context, dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDONLY|os.O_CREATE, 0o600)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() { f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, err
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("host-local's lock %s is held by another process (waited %s): %w",
				f.Name(), time.Since(start).Round(time.Millisecond), ctx.Err())
		case <-time.After(lockPoll):
		}
	}
}
