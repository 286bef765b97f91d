package nfnetlink

import (
	"errors"
	"syscall"
	"testing"
)

// received is one receive of a notifications' socket.
type received struct {
	datagram  []byte
	truncated bool
	err       error
}

// script is what a notifications' socket answers, one receive at a
// time; after it, the socket is closed.
type script []received

var errClosed = errors.New("closed")

func (s *script) receive() ([]byte, bool, error) {
	if len(*s) == 0 {
		return nil, false, errClosed
	}
	r := (*s)[0]
	*s = (*s)[1:]
	return r.datagram, r.truncated, r.err
}

// notification is a datagram of nf_tables notifications of the given
// message types (NFT_MSG_*), as the kernel multicasts them.
func notification(msgs ...uint16) received {
	var b []byte
	for _, m := range msgs {
		b = appendNFTRequest(b, m, 0, 0, 2, nlAttr{nftaRuleTable, strz("nat")})
	}
	return received{datagram: b}
}

func TestWatchChangesSignalsWhatMayRemoveSomethingWithoutWaitingForItsReader(t *testing.T) {
	many := make(script, 100)
	for i := range many {
		many[i] = notification(nftMsgDelRule)
	}
	for _, tc := range []struct {
		name     string
		received script
		signals  int // pending on the channel (room for one) when it stops
		stopped  error
	}{
		{"a rule deleted is a signal", script{notification(nftMsgNewGen, nftMsgDelRule)}, 1, errClosed},
		{"a chain deleted is a signal", script{notification(nftMsgDelChain)}, 1, errClosed},
		{"a table deleted (nft flush ruleset) is a signal", script{notification(nftMsgDelTable)}, 1, errClosed},
		{"a set element deleted is a signal", script{notification(nftMsgDelSetElem)}, 1, errClosed},
		{"a rule destroyed is a signal", script{notification(nftMsgDestroyRule)}, 1, errClosed},
		{"rules and chains added, and their generation, are none", script{notification(nftMsgNewTable, nftMsgNewChain, nftMsgNewRule, nftMsgNewGen)}, 0, errClosed},
		{"a datagram cut short is a signal: it may have held a deletion", script{{datagram: notification(nftMsgNewRule).datagram, truncated: true}}, 1, errClosed},
		{"a datagram that does not parse is a signal", script{{datagram: []byte{200, 0, 0, 0, 0, 0}}}, 1, errClosed},
		{"a message of another subsystem is a signal", script{{datagram: func() []byte {
			b := notification(nftMsgNewRule).datagram
			b[5] = 1 // subsystem 1 in the type's high byte
			return b
		}()}}, 1, errClosed},
		{"a hundred with nobody reading are one pending signal, all read", many, 1, errClosed},
		{"an overrun (ENOBUFS) is a change: what was dropped is unknown", script{{err: syscall.ENOBUFS}}, 1, errClosed},
		{"an interrupted or empty read is none", script{{err: syscall.EINTR}, {err: syscall.EAGAIN}}, 0, errClosed},
		{"another error stops the watching with it", script{{err: syscall.EBADF}, notification(nftMsgDelRule)}, 0, syscall.EBADF},
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
