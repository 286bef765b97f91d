//go:build linux

package nfnetlink

import (
	"errors"
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
