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
	file, err := openWatch(mirrorQueue)
	if err != nil {
		return nil, err
	}
	raw, err := file.SyscallConn()
	if err != nil {
		file.Close()
		return nil, fmt.Errorf("netlink: following nf_tables: %w", err)
	}
	sub := &subscription{file: file, raw: raw, buf: make([]byte, nlBufferSize)}
	if err := raw.Control(func(fd uintptr) { sub.fd = int(fd) }); err != nil { // not file.Fd, which would make it blocking
		file.Close()
		return nil, fmt.Errorf("netlink: following nf_tables: %w", err)
	}
	return sub, nil
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
// closed or a read fails, so that a question finds little queued: on a busy host (a
// kube-proxy sync is thousands of notifications) reading them was most
// of a question's time, and a Teardown waited for it.
func follow(m *Mirror, sub *subscription) {
	_ = sub.raw.Read(func(uintptr) bool {
		m.mu.Lock()
		defer m.mu.Unlock()
		if m.closed {
			return true
		}
		if err := m.drain(); err != nil {
			// A socket that fails to read may stay readable: following it
			// would spin. Questions read it themselves from now on, and
			// ask the kernel while it fails.
			return true
		}
		return false // wait in the poller for the next
	})
}
