//go:build linux

package nfnetlink

import (
	"errors"
	"fmt"
	"runtime"

	"golang.org/x/sys/unix"
)

// OpenMirror joins nf_tables' notifications of the calling thread's
// network namespace and returns a copy of the rules that follows them
// (see mirror.go). It reads nothing yet: the first question dumps the
// tables it names. Questions asked from another namespace fail.
func OpenMirror() (*Mirror, error) {
	runtime.LockOSThread() // the namespace looked at is the one the sockets open in
	defer runtime.UnlockOSThread()
	ns, known := threadNetns()
	if !known {
		return nil, errors.New("netlink: the calling thread's network namespace cannot be told")
	}
	sub, err := openSubscription()
	if err != nil {
		return nil, err
	}
	dumps, err := openNF()
	if err != nil {
		sub.close()
		return nil, err
	}
	m := newMirror(sub, dumps)
	m.sameNetns = func() bool {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		now, ok := threadNetns()
		return ok && now == ns
	}
	m.closeAll = func() {
		sub.close()
		dumps.close()
	}
	return m, nil
}

// subscription is a socket in nf_tables' multicast group, read without
// waiting.
type subscription struct {
	fd  int
	buf []byte
}

func openSubscription() (*subscription, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("netlink: opening a netfilter socket: %w", err)
	}
	// Forcing the queue past rmem_max needs CAP_NET_ADMIN, which
	// changing nf_tables needs anyway.
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, mirrorQueue) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, mirrorQueue)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink: binding: %w", err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_ADD_MEMBERSHIP, nfnlGroupNFTables); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink: joining the nf_tables notifications: %w", err)
	}
	return &subscription{fd: fd, buf: make([]byte, nlBufferSize)}, nil
}

func (s *subscription) next() ([]byte, bool, error) {
	n, _, flags, _, err := unix.Recvmsg(s.fd, s.buf, nil, unix.MSG_DONTWAIT)
	if err != nil {
		return nil, false, err
	}
	return s.buf[:n], flags&unix.MSG_TRUNC != 0, nil
}

func (s *subscription) close() { unix.Close(s.fd) }
