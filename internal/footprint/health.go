package footprint

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// A live attachment's footprint is known twice: what Teardown must
// remove, and — from the same footprint files — what must be there while
// it lives. A drift check reads the host once (liveView) for every
// attachment it is given and asks each footprint what it expects
// (expecter); what is not there is Missing, each piece named, with how a
// repair can restore it.

// expecter is a footprint that knows what must be on the host while an
// attachment lives.
type expecter interface {
	// expect adds to h what of a's footprint the view lacks.
	expect(v *liveView, a *Live, h *Health)
}

// Restore says how a repair brings a missing piece back.
type Restore uint8

const (
	// ByPlugin: the plugin's own ADD writes it again (see Plan).
	ByPlugin Restore = iota + 1
	// ByCninet: cninet writes it, exactly as the plugin (or its library)
	// does: a file, the bridge plugin's masquerade rules.
	ByCninet
	// NotInPlace: it cannot be restored while the workload lives (its
	// namespace, interface or host-side device is gone; its address is
	// another attachment's now): the workload must be re-created.
	NotInPlace
)

// Missing is one piece of a live attachment's footprint that is not on
// the host.
type Missing struct {
	// Plugin is the plugin whose footprint it is ("bridge", "portmap",
	// "firewall", "host-local", "bandwidth"), or "libcni" for the cached
	// result and "workload" for the workload's namespace and interface.
	Plugin  string
	Kind    Kind
	Backend string // "iptables", "ip6tables", "nftables", "files" or "links"
	Detail  string
	Restore Restore
	// Why says, for NotInPlace, why it cannot be restored in place.
	Why string
}

// String names the missing piece for a person: its backend, kind and
// what it is.
func (m Missing) String() string {
	s := fmt.Sprintf("%s %s %s", m.Backend, m.Kind, m.Detail)
	if m.Why != "" {
		s += " (" + m.Why + ")"
	}
	return s
}

// Health is what a drift check found of one live attachment: nothing
// missing means it is whole.
type Health struct {
	Live    *Live
	Missing []Missing
	// Err says what could not be read: the check is incomplete, and what
	// it would have shown is not in Missing.
	Err  error
	errs []error
}

// Whole reports whether nothing is missing and the check was complete.
func (h *Health) Whole() bool { return len(h.Missing) == 0 && h.Err == nil }

// InPlace reports whether a repair can restore everything missing.
func (h *Health) InPlace() bool {
	return !slices.ContainsFunc(h.Missing, func(m Missing) bool { return m.Restore == NotInPlace })
}

func (h *Health) miss(m Missing) { h.Missing = append(h.Missing, m) }

// Plugins returns the plugins whose own ADD a repair runs again, in the
// order of the network's conflist.
func (h *Health) Plugins() []string {
	var out []string
	for _, p := range h.Live.Net.Plugins {
		if !slices.Contains(out, p.Type) && slices.ContainsFunc(h.Missing, func(m Missing) bool {
			return m.Restore == ByPlugin && m.Plugin == p.Type
		}) {
			out = append(out, p.Type)
		}
	}
	return out
}

// Checker checks live attachments against the host, reading the host
// once for all of them. Build one per check.
type Checker struct {
	ctx  context.Context
	host Seams
}

// NewChecker returns a checker of live attachments on host h; ctx bounds
// everything it reads.
func NewChecker(ctx context.Context, h Seams) *Checker { return &Checker{ctx: ctx, host: h} }

// Check returns the health of each of lives, in order, from one read of
// the host.
func (c *Checker) Check(lives []*Live) []Health {
	v := newLiveView(c.ctx, c.host)
	out := make([]Health, len(lives))
	for i, a := range lives {
		out[i] = checkOne(v, a)
	}
	return out
}

// checkOne asks every footprint what a lacks.
func checkOne(v *liveView, a *Live) Health {
	h := Health{Live: a}
	for _, fp := range footprints {
		if e, ok := fp.(expecter); ok {
			e.expect(v, a, &h)
		}
	}
	workloadDevices{}.expect(v, a, &h)
	return h
}

// unknown records that what err names could not be read: the check is
// incomplete. The same error (a listing several pieces need) is kept
// once.
func (h *Health) unknown(err error) {
	if err == nil {
		return
	}
	for _, have := range h.errs {
		if have.Error() == err.Error() {
			return
		}
	}
	h.errs = append(h.errs, err)
	h.Err = errors.Join(h.errs...)
}

// joinDetails renders missing pieces for a log line or an error.
func joinDetails(ms []Missing) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = m.String()
	}
	return strings.Join(s, "; ")
}
