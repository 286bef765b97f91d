//go:build linux

package nfnetlink

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"

	"github.com/seed1280861d/cninet/host"
	"golang.org/x/sys/unix"
)

// nlReceiveTimeout bounds one wait for the kernel, which answers at once
// or never (a socket that lost messages).
const nlReceiveTimeout = 5 // seconds

// nlBufferSize is the receive buffer: the kernel fills a dump's datagrams
// up to 32 KiB when the reader offers that much, and cuts a datagram
// that does not fit.
const nlBufferSize = 64 << 10

// nlAckBuffer is the socket's receive queue: a batch of batchChunk
// deletions is answered by as many acks, each taking up to a kilobyte of
// the queue.
const nlAckBuffer = 1 << 20

// errCut says a datagram arrived cut to the buffer's size.
var errCut = errors.New("datagram cut")

// nfConn is one netlink socket to nf_tables, for one question at a time.
type nfConn struct {
	fd  int
	buf []byte
	ns  netnsID // the network namespace the socket talks to
	// keep: ns is known, so the socket may serve a later question
	// asked from the same namespace (idle).
	keep bool
	// recvmsg reads one datagram into buf: unix.Recvmsg on fd, except in
	// tests.
	recvmsg func(buf []byte) (n, flags int, err error)
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
	// Room for a whole batch's acks, which the kernel sends at once and
	// drops (ENOBUFS) where the queue is full. Forcing it past rmem_max
	// needs CAP_NET_ADMIN, which changing nf_tables needs anyway.
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, nlAckBuffer) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, nlAckBuffer)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink: binding: %w", err)
	}
	c := &nfConn{fd: fd, buf: *receiveBuffers.Get().(*[]byte)}
	c.recvmsg = func(buf []byte) (int, int, error) {
		n, _, flags, _, err := unix.Recvmsg(fd, buf, nil, 0)
		return n, flags, err
	}
	return c, nil
}

// receiveBuffers keeps the sockets' receive buffers for the next
// question: a Teardown asks a dozen or more, and a fresh 64 KiB each
// made a Teardown allocate a megabyte, whose collection then ran beside
// the plugins. A datagram is valid only until the next receive (and the
// socket's close), so no reader holds on to a buffer put back.
var receiveBuffers = sync.Pool{New: func() any {
	buf := make([]byte, nlBufferSize)
	return &buf
}}

// Closing a netfilter netlink socket makes nf_tables take its commit
// mutex (it lets go of what the closed port owned: NETLINK_URELEASE), so
// each close waits for whatever transaction is being committed. On a host
// where the plugins and kube-proxy commit all the time that was 5–20 ms a
// close, most of a Teardown's own time under load. So the questions
// (ProbeChain, LookupRule, AnyRule, ListRules, ListTables) reuse their
// sockets: one whose exchange ended cleanly waits in idle for the next
// question asked from the same network namespace (a socket talks to the
// namespace it was opened in, whatever thread uses it later). Batches of
// deletions (DeleteRules, DeleteChains) do too: their own commit waits
// for the mutex anyway, but a close after it would wait for the next
// writer's commit as well (measured beside a writer of 1,000-rule
// batches every second and iptables-nft commands in a loop: a close took
// 10.6 ms at the median and 56 ms at p99, a question 18 µs). A batch
// whose acks came late is no risk to the next exchange: every exchange
// reads past answers of an earlier sequence number.

// netnsID names a network namespace: its nsfs inode. A namespace lives
// while a socket in it is open, so a kept socket's inode is never reused.
type netnsID struct{ dev, ino uint64 }

// maxIdle bounds the kept sockets; questions asked at once beyond it open
// sockets of their own and close them.
const maxIdle = 4

var idle struct {
	mu    sync.Mutex
	conns []*nfConn
}

// threadNetns names the calling thread's network namespace; false when it
// cannot be told.
func threadNetns() (netnsID, bool) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/thread-self/ns/net", &st); err != nil {
		return netnsID{}, false
	}
	return netnsID{uint64(st.Dev), st.Ino}, true
}

// acquire returns a socket to nf_tables in the calling thread's network
// namespace: a kept one if there is one, else a new one.
func acquire() (*nfConn, error) {
	runtime.LockOSThread() // the namespace looked at is the one the socket opens in
	defer runtime.UnlockOSThread()
	ns, known := threadNetns()
	if known {
		idle.mu.Lock()
		for i := len(idle.conns) - 1; i >= 0; i-- {
			if c := idle.conns[i]; c.ns == ns {
				idle.conns = slices.Delete(idle.conns, i, i+1)
				idle.mu.Unlock()
				return c, nil
			}
		}
		idle.mu.Unlock()
	}
	c, err := openNF()
	if err != nil {
		return nil, err
	}
	c.ns, c.keep = ns, known
	return c, nil
}

// release keeps c for a later question when its exchange ended cleanly
// (every message of the answer read: nothing of it is left to mix with
// the next), else closes it.
func release(c *nfConn, clean bool) {
	if clean && c.keep {
		idle.mu.Lock()
		if len(idle.conns) < maxIdle {
			idle.conns = append(idle.conns, c)
			idle.mu.Unlock()
			return
		}
		idle.mu.Unlock()
	}
	c.close()
}

func (c *nfConn) close() {
	unix.Close(c.fd)
	buf := c.buf
	c.buf = nil
	receiveBuffers.Put(&buf)
}

func (c *nfConn) send(req []byte) error {
	if err := unix.Sendto(c.fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink: sending: %w", err)
	}
	return nil
}

// receive reads one datagram into c.buf. A signal (the runtime's, or a
// child's exit) interrupts a read with a timeout; a datagram larger than
// the buffer would arrive cut and is refused.
func (c *nfConn) receive() ([]byte, error) {
	for {
		n, flags, err := c.recvmsg(c.buf)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return nil, fmt.Errorf("netlink: receiving: %w", err)
		case flags&unix.MSG_TRUNC != 0:
			return nil, fmt.Errorf("netlink: a reply did not fit %d bytes: %w", len(c.buf), errCut)
		}
		return c.buf[:n], nil
	}
}

// ProbeChain asks the kernel whether chain exists in table of family.
func ProbeChain(family, table, chain string) (bool, error) {
	c, err := acquire()
	if err != nil {
		return false, err
	}
	exists, err := probeChain(c, family, table, chain)
	release(c, err == nil)
	return exists, err
}

// LookupRule looks up one rule by handle, as lookupRule does, over a
// socket of its own.
func LookupRule(family, table, chain string, handle uint64) (Rule, bool, error) {
	c, err := acquire()
	if err != nil {
		return Rule{}, false, err
	}
	r, found, err := lookupRule(c, family, table, chain, handle)
	release(c, err == nil)
	return r, found, err
}

// AnyRule reports whether match holds for a rule of table of family (of
// chain only, unless chain is ""), as anyRule does, over a socket of its
// own.
func AnyRule(family, table, chain string, match func(Rule) bool) (bool, error) {
	c, err := acquire()
	if err != nil {
		return false, err
	}
	found, err := anyRule(c, family, table, chain, match)
	release(c, err == nil && !found) // a match stops reading the dump midway
	return found, err
}

// FindRules returns the rules of chains of table of family whose comment
// is one of comments, as findRules does for each chain in turn, over a
// socket of its own.
func FindRules(family, table string, chains []string, comments map[string]bool) ([]Rule, error) {
	c, err := acquire()
	if err != nil {
		return nil, err
	}
	var rules []Rule
	for _, chain := range chains {
		var more []Rule
		if more, err = findRules(c, family, table, chain, comments); err != nil {
			break
		}
		rules = append(rules, more...)
	}
	release(c, err == nil)
	return rules, err
}

// ListRules lists every rule of table of family, as listRules does,
// over a socket of its own.
func ListRules(family, table string) ([]Rule, error) {
	c, err := acquire()
	if err != nil {
		return nil, err
	}
	rules, err := listRules(c, family, table)
	release(c, err == nil)
	return rules, err
}

// EachRule calls visit with every rule of table of family, as eachRule
// does (a rule's Expr is valid only during visit; begin before each
// attempt of the dump), over a socket of its own.
func EachRule(family, table string, begin func(), visit func(Rule) error) error {
	c, err := acquire()
	if err != nil {
		return err
	}
	err = eachRule(c, family, table, begin, visit)
	release(c, err == nil)
	return err
}

// nfWrite serialises this process's batches: nf_tables has one generation
// for all its tables, so a batch of ip6tables' would otherwise refuse one
// of iptables' built at the generation before, and retry.
var nfWrite sync.Mutex

// DeleteRules deletes the rules of targets by handle, as deleteRules
// does, over a kept socket (acquire) or one of its own.
func DeleteRules(family, table string, targets []Target) ([]host.HandleOutcome, error) {
	nfWrite.Lock()
	defer nfWrite.Unlock()
	c, err := acquire()
	if err != nil {
		return make([]host.HandleOutcome, len(targets)), err
	}
	out, err := deleteRules(c, family, table, targets)
	release(c, err == nil)
	return out, err
}

// DeleteChains flushes and deletes chains by name, as deleteChains
// does, over a kept socket (acquire) or one of its own.
func DeleteChains(family, table string, chains []string) ([]host.HandleOutcome, error) {
	nfWrite.Lock()
	defer nfWrite.Unlock()
	c, err := acquire()
	if err != nil {
		return make([]host.HandleOutcome, len(chains)), err
	}
	out, err := deleteChains(c, family, table, chains)
	release(c, err == nil)
	return out, err
}

// ListTables lists the nf_tables tables, as listTables does, over a
// socket of its own.
func ListTables() (map[host.NFTable]bool, error) {
	c, err := acquire()
	if err != nil {
		return nil, err
	}
	tables, err := listTables(c)
	release(c, err == nil)
	return tables, err
}
