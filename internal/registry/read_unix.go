//go:build unix

package registry

import (
	"os"
	"slices"
	"syscall"

	"golang.org/x/sys/unix"
)

// readFile reads the file at path into buf's array (grown when too
// small) with no system call a record does not need: open, read to the
// end, close. os.ReadFile adds an fstat, and os.Open's attempt to put the
// file in the runtime's poller four fcntl and an epoll_ctl: over
// thousands of records, most of a listing's system calls.
func readFile(path string, buf []byte) ([]byte, error) {
	fd, err := openRetrying(path)
	if err != nil {
		return buf[:0], &os.PathError{Op: "open", Path: path, Err: err}
	}
	defer syscall.Close(fd)
	buf = buf[:0]
	for {
		if len(buf) == cap(buf) {
			buf = slices.Grow(buf, max(len(buf), 4096)) // a record is about 2 KB
		}
		n, err := syscall.Read(fd, buf[len(buf):cap(buf)])
		switch {
		case err == syscall.EINTR:
			continue
		case err != nil:
			return buf, &os.PathError{Op: "read", Path: path, Err: err}
		case n == 0:
			return buf, nil
		}
		buf = buf[:len(buf)+n]
	}
}

func openRetrying(path string) (int, error) {
	for {
		fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != syscall.EINTR {
			return fd, err
		}
	}
}

// stampOf is the stamp of the file at path (ok); os.ErrNotExist when
// there is none.
func stampOf(path string) (stamp fileStamp, ok bool, err error) {
	var st unix.Stat_t
	for {
		err = unix.Stat(path, &st)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return fileStamp{}, false, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	return fileStamp{dev: uint64(st.Dev), ino: uint64(st.Ino), size: uint64(st.Size),
		mtime: st.Mtim.Nano(), ctime: st.Ctim.Nano()}, true, nil
}
