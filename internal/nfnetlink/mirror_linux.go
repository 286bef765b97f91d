//go:build linux

package nfnetlink

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"

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
	go follow(m, sub)
	return m, nil
}

// subscription is a socket in nf_tables' multicast group, read without
// waiting by questions, and through Go's poller by follow.
type subscription struct {
	file *os.File
	raw  syscall.RawConn
	fd   int
	buf  []byte
}

func openSubscription() (*subscription, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_NETFILTER)
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
	file := os.NewFile(uintptr(fd), "nf_tables notifications")
	raw, err := file.SyscallConn()
	if err != nil {
		file.Close()
		return nil, fmt.Errorf("netlink: following nf_tables: %w", err)
	}
	return &subscription{file: file, raw: raw, fd: fd, buf: make([]byte, nlBufferSize)}, nil
}

// next reads a datagram without waiting. The Mirror's lock keeps it
// from racing with close.
func (s *subscription) next() ([]byte, bool, error) {
	n, _, flags, _, err := unix.Recvmsg(s.fd, s.buf, nil, unix.MSG_DONTWAIT)
	if err != nil {
		return nil, false, err
	}
	return s.buf[:n], flags&unix.MSG_TRUNC != 0, nil
}

func (s *subscription) close() { s.file.Close() }

// follow applies the notifications as they come, until the copy is
// closed, so that a question finds little queued: on a busy host (a
// kube-proxy sync is thousands of notifications) reading them was most
// of a question's time, and a Teardown waited for it.
func follow(m *Mirror, sub *subscription) {
	_ = sub.raw.Read(func(uintptr) bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.closed {
			return true
		}
		_ = m.drain() // a failed read fails the next question, which asks the kernel
		return false  // wait in the poller for the next
	})
}
