package nfnetlink

import (
	"errors"
	"syscall"
	"testing"
)

// script is what a notifications' socket answers, one receive at a
// time; after it, the socket is closed.
type script []error

var errClosed = errors.New("closed")

func (s *script) receive() error {
	if len(*s) == 0 {
		return errClosed
	}
	err := (*s)[0]
	*s = (*s)[1:]
	return err
}

func TestWatchChangesSignalsWithoutWaitingForItsReader(t *testing.T) {
	many := make(script, 100)
	for _, tc := range []struct {
		name     string
		received script
		signals  int // pending on the channel (room for one) when it stops
		stopped  error
	}{
		{"a notification is a signal", script{nil}, 1, errClosed},
		{"a hundred with nobody reading are one pending signal, all read", many, 1, errClosed},
		{"an overrun (ENOBUFS) is a change: what was dropped is unknown", script{syscall.ENOBUFS}, 1, errClosed},
		{"an interrupted or empty read is none", script{syscall.EINTR, syscall.EAGAIN}, 0, errClosed},
		{"another error stops the watching with it", script{syscall.EBADF, nil}, 0, syscall.EBADF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			received := tc.received
			changes := make(chan struct{}, 1)
			err := watchChanges(received.receive, changes)
			if !errors.Is(err, tc.stopped) {
				t.Errorf("stopped with %v, want %v", err, tc.stopped)
			}
			if len(changes) != tc.signals {
				t.Errorf("%d signals pending, want %d", len(changes), tc.signals)
			}
			if tc.stopped == errClosed && len(received) != 0 {
				t.Errorf("%d notifications left unread", len(received))
			}
		})
	}
}
