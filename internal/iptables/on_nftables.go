package iptables

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/nfnetlink"
)

// onNFTables returns h's iptables with netlink probes when the binary
// is iptables-nft, else an error.
func onNFTables(h *hostIPTables, ipv6 bool) (*nfIPTables, error) {
	resolved, err := filepath.EvalSymlinks(h.list)
	if err != nil {
		return nil, err
	}
	// by its name: a multi-call binary needs it; --version takes no lock
	version, _, err := runCommand(context.Background(), h.list, nil, "--version")
	if err != nil {
		return nil, err
	}
	if !strings.Contains(version, "(nf_tables)") {
		return nil, fmt.Errorf("%s is %s", h.list, strings.TrimSpace(version))
	}
	family := "ip"
	if ipv6 {
		family = "ip6"
	}
	return &nfIPTables{hostIPTables: h, family: family, resolved: resolved}, nil
}

// nfIPTables is the host's iptables on the nf_tables backend (iptables-nft):
// its tables are nf_tables tables, which netlink reads directly, so chains
// are looked up and rules scanned without starting a process. The plugins
// run the same iptables binary, so their rules are where this looks.
type nfIPTables struct {
	*hostIPTables
	family   string // "ip" or "ip6"
	resolved string // the binary found on the nf_tables backend
}

// WithContext implements ContextBinder, probes included.
func (h *nfIPTables) WithContext(ctx context.Context) host.IPTables {
	b := *h
	b.hostIPTables = h.hostIPTables.bound(ctx)
	return &b
}

// errBackendSwitched says iptables no longer resolves to the binary that
// was found on the nf_tables backend (an operator switched alternatives),
// so its tables may not be nf_tables' any more.
var errBackendSwitched = errors.New("iptables was switched to another binary since it was opened")

// switched reports whether iptables no longer resolves to the binary found
// on the nf_tables backend.
func (h *nfIPTables) switched() bool {
	resolved, err := filepath.EvalSymlinks(h.list)
	return err != nil || resolved != h.resolved
}

// OnNFTables implements host.NFTablesBacked: while iptables resolves to
// the binary found on the nf_tables backend, its tables are nf_tables'.
func (h *nfIPTables) OnNFTables() bool { return !h.switched() }

// sameBinary checks that iptables still resolves to the nf_tables binary,
// and that a bound context has not ended.
func (h *nfIPTables) sameBinary() error {
	if h.ctx != nil && h.ctx.Err() != nil {
		return h.ctx.Err()
	}
	if resolved, err := filepath.EvalSymlinks(h.list); err != nil || resolved != h.resolved {
		return fmt.Errorf("%s: %w", h.list, errBackendSwitched)
	}
	return nil
}

// ProbeChain implements ChainProber.
func (h *nfIPTables) ProbeChain(table, chain string) (bool, error) {
	if err := h.sameBinary(); err != nil {
		return false, err
	}
	return nfnetlink.ProbeChain(h.family, table, chain)
}

// MayMention implements AddrScanner: an address a rule matches on or
// rewrites to is in that rule's expressions, byte for byte.
func (h *nfIPTables) MayMention(table, chain string, addrs []netip.Addr) (bool, error) {
	if err := h.sameBinary(); err != nil {
		return true, err
	}
	raw := nfnetlink.AddrBytes(addrs)
	found, err := nfnetlink.AnyRule(h.family, table, chain, func(r nfnetlink.Rule) bool { return r.Mentions(raw) })
	return found || err != nil, err
}

// MayMentionOther implements OtherAddrScanner: a rule that jumps to one of
// except carries that chain's name in its verdict, byte for byte, so the
// attachment's own rules are told from others' without decoding them.
func (h *nfIPTables) MayMentionOther(table, chain string, addrs []netip.Addr, except []string) (bool, error) {
	if err := h.sameBinary(); err != nil {
		return true, err
	}
	raw := nfnetlink.AddrBytes(addrs)
	own := make([][]byte, len(except))
	for i, name := range except {
		own[i] = []byte(name)
	}
	found, err := nfnetlink.AnyRule(h.family, table, chain, func(r nfnetlink.Rule) bool {
		return r.Mentions(raw) && (len(own) == 0 || !r.Mentions(own))
	})
	return found || err != nil, err
}
