//go:build linux

package footprint

import (
	"errors"
	"fmt"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// nlSeq numbers requests; replies are matched to them by it.
var nlSeq atomic.Uint32

// nlReceiveTimeout bounds one wait for the kernel, which answers at once
// or never (a socket that lost messages).
const nlReceiveTimeout = 5 // seconds

// dumpAttempts bounds the retries of a dump that a concurrent change
// interrupted.
const dumpAttempts = 5

// nlBufferSize is the receive buffer: the kernel fills a dump's datagrams
// up to 32 KiB when the reader offers that much, and cuts a datagram
// that does not fit.
const nlBufferSize = 64 << 10

// nfConn is one netlink socket to nf_tables, for one question.
type nfConn struct {
	fd  int
	buf []byte
}

func openNF() (*nfConn, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return nil, fmt.Errorf("netlink: opening a netfilter socket: %w", err)
	}
	tv := unix.Timeval{Sec: nlReceiveTimeout}
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink: setting a receive timeout: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink: binding: %w", err)
	}
	return &nfConn{fd: fd, buf: make([]byte, nlBufferSize)}, nil
}

func (c *nfConn) close() { unix.Close(c.fd) }

// errStopped ends an exchange whose reader has what it needs.
var errStopped = errors.New("stopped by the reader")

// exchange sends req (numbered seq) and calls visit with each message of
// the reply, up to NLMSG_DONE (a dump) or the ack. A message's bytes are
// valid only during the call; visit returns false to stop reading.
func (c *nfConn) exchange(req []byte, seq uint32, visit func(nlMessage) bool) error {
	if err := unix.Sendto(c.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink: sending: %w", err)
	}
	interrupted := false
	for {
		n, err := c.receive()
		if err != nil {
			return err
		}
		msgs, err := parseNLMessages(c.buf[:n])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.seq != seq {
				continue // a late answer to an earlier question
			}
			interrupted = interrupted || m.flags&nlmFDumpIntr != 0
			switch m.typ {
			case nlmsgDone:
				if err := doneErr(m); err != nil {
					return err // the dump failed in the kernel: what came is not all
				}
				return dumpErr(interrupted)
			case nlmsgError:
				if err := errnoOf(m); err != nil {
					return err
				}
				return dumpErr(interrupted)
			}
			if !visit(m) {
				return errStopped
			}
		}
	}
}

// receive reads one datagram into c.buf. A signal (the runtime's, or a
// child's exit) interrupts a read with a timeout; a datagram larger than
// the buffer would arrive cut and is refused.
func (c *nfConn) receive() (int, error) {
	for {
		n, _, flags, _, err := unix.Recvmsg(c.fd, c.buf, nil, 0)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return 0, fmt.Errorf("netlink: receiving: %w", err)
		case flags&unix.MSG_TRUNC != 0:
			return 0, fmt.Errorf("netlink: a reply did not fit %d bytes", len(c.buf))
		}
		return n, nil
	}
}

func dumpErr(interrupted bool) error {
	if interrupted {
		return errDumpInterrupted
	}
	return nil
}

// nfProbeChain asks nf_tables whether chain exists in table of family
// ("ip", "ip6", "inet"): one lookup by name, whatever the table holds.
func nfProbeChain(family, table, chain string) (bool, error) {
	c, err := openNF()
	if err != nil {
		return false, err
	}
	defer c.close()
	proto, ok := nfproto[family]
	if !ok {
		return false, fmt.Errorf("netlink: unknown nftables family %q", family)
	}
	seq := nlSeq.Add(1)
	req := nftRequest(nftMsgGetChain, nlmFAck, seq, proto,
		nlAttr{nftaChainTable, strz(table)}, nlAttr{nftaChainName, strz(chain)})
	err = c.exchange(req, seq, func(nlMessage) bool { return true })
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, unix.ENOENT):
		return false, nil // no such chain, or no such table
	}
	return false, fmt.Errorf("netlink: looking up chain %s in %s %s: %w", chain, family, table, err)
}

// nfAnyRule reports whether match holds for a rule of table of family (of
// chain only, unless chain is ""), reading the rules as the kernel dumps
// them and stopping at the first match. A rule's bytes are valid only
// during match. A table or chain that does not exist has no rules; a
// dump that a change interrupted is taken again, since a rule it skipped
// might have matched.
func nfAnyRule(family, table, chain string, match func(nlRule) bool) (bool, error) {
	proto, ok := nfproto[family]
	if !ok {
		return false, fmt.Errorf("netlink: unknown nftables family %q", family)
	}
	c, err := openNF()
	if err != nil {
		return false, err
	}
	defer c.close()
	attrs := []nlAttr{{nftaRuleTable, strz(table)}}
	if chain != "" {
		attrs = append(attrs, nlAttr{nftaRuleChain, strz(chain)})
	}
	for attempt := 1; ; attempt++ {
		var parseErr error
		seq := nlSeq.Add(1)
		err := c.exchange(nftRequest(nftMsgGetRule, nlmFDump, seq, proto, attrs...), seq, func(m nlMessage) bool {
			r, err := parseNLRule(family, m)
			if err != nil {
				parseErr = err
				return false
			}
			return !r.in(table, chain) || !match(r)
		})
		switch {
		case parseErr != nil:
			return false, parseErr
		case errors.Is(err, errStopped):
			return true, nil
		case errors.Is(err, unix.ENOENT):
			return false, nil
		case errors.Is(err, errDumpInterrupted) && attempt < dumpAttempts:
			continue // the dump ran to its end: the socket is ready for the next
		case err != nil:
			return false, fmt.Errorf("netlink: reading the rules of %s %s: %w", family, table, err)
		}
		return false, nil
	}
}
