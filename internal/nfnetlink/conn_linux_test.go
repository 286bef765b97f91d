//go:build linux

package nfnetlink

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

func TestReceiveRetriesASignalAndRefusesACutDatagram(t *testing.T) {
	type read struct {
		n, flags int
		err      error
	}
	for _, tc := range []struct {
		name    string
		reads   []read
		wantLen int
		wantErr error
	}{
		{"a read a signal interrupted is read again", []read{{0, 0, unix.EINTR}, {0, 0, unix.EINTR}, {20, 0, nil}}, 20, nil},
		{"a datagram larger than the buffer is refused", []read{{64, unix.MSG_TRUNC, nil}}, 0, errCut},
		{"a timeout is an error", []read{{0, 0, unix.EAGAIN}}, 0, unix.EAGAIN},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &nfConn{buf: make([]byte, 64)}
			c.recvmsg = func(buf []byte) (int, int, error) {
				r := tc.reads[0]
				tc.reads = tc.reads[1:]
				for i := range min(r.n, len(buf)) {
					buf[i] = byte(i + 1)
				}
				return r.n, r.flags, r.err
			}
			got, err := c.receive()
			if !errors.Is(err, tc.wantErr) || len(got) != tc.wantLen {
				t.Errorf("receive = %d bytes, %v; want %d, %v", len(got), err, tc.wantLen, tc.wantErr)
			}
			for i, b := range got {
				if b != byte(i+1) {
					t.Fatalf("byte %d = %d, want %d: not what was read", i, b, i+1)
				}
			}
			if len(tc.reads) != 0 {
				t.Errorf("%d reads left unread", len(tc.reads))
			}
		})
	}
}

// A socket whose exchange ended cleanly serves the next question from the
// same namespace; one that did not is closed, and so is one past maxIdle.
func TestSocketsAreKeptOnlyAfterACleanExchangeAndUpToMaxIdle(t *testing.T) {
	drainIdle()
	t.Cleanup(drainIdle)

	first, err := acquire()
	if err != nil {
		t.Fatal(err)
	}
	if !first.keep {
		t.Fatal("the thread's network namespace could not be told (/proc/thread-self/ns/net): no socket would be kept")
	}
	release(first, true)
	if again, err := acquire(); err != nil || again != first {
		t.Fatalf("after a clean exchange acquire = %p, %v; want the kept socket %p", again, err, first)
	} else {
		release(again, false)
	}
	if fresh, err := acquire(); err != nil || fresh == first {
		t.Fatalf("after an exchange that did not end cleanly acquire = %p, %v; want a new socket, not %p", fresh, err, first)
	} else if _, err := unix.FcntlInt(uintptr(first.fd), unix.F_GETFD, 0); err == nil && first.fd != fresh.fd {
		t.Errorf("the socket of an unclean exchange is still open (fd %d)", first.fd)
	} else {
		release(fresh, true)
	}
	drainIdle()
	var held []*nfConn
	for range maxIdle + 2 {
		c, err := acquire()
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	for _, c := range held {
		release(c, true)
	}
	idle.mu.Lock()
	kept := len(idle.conns)
	idle.mu.Unlock()
	if kept != maxIdle {
		t.Errorf("%d sockets kept after %d clean releases, want maxIdle (%d)", kept, len(held), maxIdle)
	}
}

// A batch of deletions keeps its socket for the next exchange once it
// ended cleanly, as a question does: closing it would wait for the next
// writer's commit. (Nothing is deleted here: without targets a batch
// only asks for the ruleset's generation.)
func TestADeletionBatchKeepsItsSocket(t *testing.T) {
	drainIdle()
	t.Cleanup(drainIdle)
	for name, batch := range map[string]func() error{
		"DeleteRules":  func() error { _, err := DeleteRules("ip", "cninet_test_absent", nil); return err },
		"DeleteChains": func() error { _, err := DeleteChains("ip", "cninet_test_absent", nil); return err },
	} {
		t.Run(name, func(t *testing.T) {
			drainIdle()
			if err := batch(); err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatalf("nf_tables cannot be asked (CI=true forbids skipping): %v", err)
				}
				t.Skipf("nf_tables cannot be asked here (not root?): %v", err)
			}
			idle.mu.Lock()
			kept := len(idle.conns)
			idle.mu.Unlock()
			if kept != 1 {
				t.Fatalf("%d sockets kept after a clean batch, want its own (1)", kept)
			}
		})
	}
}

// drainIdle closes the kept sockets.
func drainIdle() {
	idle.mu.Lock()
	defer idle.mu.Unlock()
	for _, c := range idle.conns {
		c.close()
	}
	idle.conns = nil
}
