//go:build linux

package footprint

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
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

// CreateWhole creates path holding body with mode, whole or not at all,
// and only where no file is (os.ErrExist otherwise): body is written to
// an unnamed file in path's directory (O_TMPFILE), which is then linked
// into place. A process killed at any point leaves no cut file and no
// stray one. A file system without O_TMPFILE gets an exclusive create
// and a write, as host-local and libcni write theirs.
func CreateWhole(path string, body []byte, mode os.FileMode) error {
	fd, err := unix.Open(filepath.Dir(path), unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, uint32(mode.Perm()))
	if err != nil {
		return createExclusive(path, body, mode)
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if _, err := f.Write(body); err != nil {
		return err
	}
	if err := f.Chmod(mode.Perm()); err != nil { // the umask took bits away
		return err
	}
	err = unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), unix.AT_FDCWD, path, unix.AT_SYMLINK_FOLLOW)
	if errors.Is(err, unix.EEXIST) {
		return &os.PathError{Op: "link", Path: path, Err: os.ErrExist}
	}
	return err
}
