//go:build linux

package nfnetlink

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// watchBuffer receives one notification at a time; what does not fit is
// cut (and dropped by the kernel), and a cut one counts as a deletion
// (removes).
const watchBuffer = 4 << 10

// WatchChanges subscribes to the nf_tables changes of the calling
// thread's network namespace (see watch.go) and signals each on the
// returned channel, which holds one pending signal at most. The channel
// is closed, after the socket, when ctx ends or reading fails.
func WatchChanges(ctx context.Context) (<-chan struct{}, error) {
	f, err := openWatch(0)
	if err != nil {
		return nil, err
	}
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("netlink: watching nf_tables: %w", err)
	}
	buf := make([]byte, watchBuffer)
	receive := func() ([]byte, bool, error) {
		var n, flags int
		var recvErr error
		err := raw.Read(func(fd uintptr) bool {
			n, _, flags, _, recvErr = unix.Recvmsg(int(fd), buf, nil, 0)
			return !errors.Is(recvErr, unix.EAGAIN) // else: wait in the poller
		})
		if err != nil {
			return nil, false, err // closed: the watching ends
		}
		if recvErr != nil {
			return nil, false, recvErr
		}
		return buf[:n], flags&unix.MSG_TRUNC != 0, nil
	}
	changes := make(chan struct{}, 1)
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		_ = watchChanges(receive, changes)
	}()
	go func() {
		select {
		case <-ctx.Done():
		case <-stopped: // reading failed
		}
		f.Close() // wakes the reader, which stops
		<-stopped
		close(changes)
	}()
	return changes, nil
}

// openWatch opens a netfilter socket in the calling thread's network
// namespace (a goroutine that moved to another namespace is locked to
// its thread), joined to the nf_tables group, non-blocking so that Go's
// poller waits for it and closing it wakes its reader. queue, unless 0,
// is its receive queue's size.
func openWatch(queue int) (*os.File, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("netlink: opening a netfilter socket: %w", err)
	}
	// Forcing the queue past rmem_max needs CAP_NET_ADMIN, which
	// changing nf_tables needs anyway.
	if queue > 0 && unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, queue) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, queue)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink: binding: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, nfnlGroupNFTables); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink: joining the nf_tables notifications: %w", err)
	}
	return os.NewFile(uintptr(fd), "nf_tables notifications"), nil
}
