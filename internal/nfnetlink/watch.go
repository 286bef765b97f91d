package nfnetlink

import (
	"errors"
	"syscall"
)

// A repair must start as soon as someone flushes the plugins' rules, not
// at the next periodic check. nf_tables tells every socket that joined
// its multicast group (NFNLGRP_NFTABLES) of each change committed in the
// socket's network namespace, by whoever made it: nft, iptables-nft,
// firewalld. A drift is only ever something removed — a flush, a deleted
// rule, chain, table, set element, a replaced rule (its old one deleted)
// — so only a deletion is a signal: the rules a Setup adds, which every
// workload's start writes, wake nobody. What was deleted does not matter
// here (the check reads the host again). The socket is read without
// pause so the kernel's queue never fills with what nobody reads.

// nfnlGroupNFTables is NFNLGRP_NFTABLES (linux/netfilter/nfnetlink.h).
const nfnlGroupNFTables = 7

// The nf_tables messages of something removed beside nftMsgDelChain
// and nftMsgDelRule (linux/netfilter/nf_tables.h); NFT_MSG_DESTROY* run
// from nftMsgDestroyTable to nftMsgDestroyFlowtable.
const (
	nftMsgDelTable         = 2
	nftMsgDelSet           = 11
	nftMsgDelSetElem       = 14
	nftMsgDelObj           = 20
	nftMsgDelFlowtable     = 24
	nftMsgDestroyTable     = 26
	nftMsgDestroyFlowtable = 32
)

// deletion reports whether an nf_tables message type removes something.
func deletion(msg uint16) bool {
	switch msg {
	case nftMsgDelTable, nftMsgDelChain, nftMsgDelRule, nftMsgDelSet, nftMsgDelSetElem, nftMsgDelObj, nftMsgDelFlowtable:
		return true
	}
	return msg >= nftMsgDestroyTable && msg <= nftMsgDestroyFlowtable
}

// removes reports whether a notification's datagram may remove
// something: a deletion among its messages, or a datagram that cannot
// be read whole (cut short, or not nf_tables'), which may hold one.
func removes(datagram []byte, truncated bool) bool {
	msgs, err := parseNLMessages(datagram)
	if truncated || err != nil || len(msgs) == 0 {
		return true
	}
	for _, m := range msgs {
		if m.typ>>8 != nfnlSubsysNFTables || deletion(m.typ&0xff) {
			return true
		}
	}
	return false
}

// watchChanges reads notifications with receive until it fails, and
// signals each that may remove something (removes) on changes without
// ever waiting for its reader: a signal already pending stands for the
// next ones. An overrun (ENOBUFS: the kernel dropped notifications the
// socket had no room for) is a change too, since what was dropped is
// unknown. It returns the error that stopped it (the socket closed, or
// failing).
func watchChanges(receive func() (datagram []byte, truncated bool, err error), changes chan<- struct{}) error {
	for {
		datagram, truncated, err := receive()
		switch {
		case errors.Is(err, syscall.EINTR), errors.Is(err, syscall.EAGAIN):
			continue
		case err == nil && !removes(datagram, truncated):
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
