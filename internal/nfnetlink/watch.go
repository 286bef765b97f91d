package nfnetlink

import (
	"errors"
	"syscall"
)

// A repair must start as soon as someone flushes the plugins' rules, not
// at the next periodic check. nf_tables tells every socket that joined
// its multicast group (NFNLGRP_NFTABLES) of each change committed in the
// socket's network namespace, by whoever made it: nft, iptables-nft,
// firewalld. What changed does not matter here (the check reads the host
// again), so a notification is only a signal; the socket is read without
// pause so the kernel's queue never fills with what nobody reads.

// nfnlGroupNFTables is NFNLGRP_NFTABLES (linux/netfilter/nfnetlink.h).
const nfnlGroupNFTables = 7

// watchChanges reads notifications with receive until it fails, and
// signals each change on changes without ever waiting for its reader: a
// signal already pending stands for the next ones. An overrun (ENOBUFS:
// the kernel dropped notifications the socket had no room for) is a
// change too, since what was dropped is unknown. It returns the error
// that stopped it (the socket closed, or failing).
func watchChanges(receive func() error, changes chan<- struct{}) error {
	for {
		err := receive()
		switch {
		case errors.Is(err, syscall.EINTR), errors.Is(err, syscall.EAGAIN):
			continue
		case err == nil, errors.Is(err, syscall.ENOBUFS):
			select {
			case changes <- struct{}{}:
			default: // one pending signal is enough
			}
		default:
			return err
		}
	}
}
