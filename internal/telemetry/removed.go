package telemetry

import (
	"context"
	"fmt"
	"iter"
	"sort"
	"strings"

	"github.com/seed1280861d/cninet/internal/footprint"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Cleaned ends a cleanup span with what the cleanup removed, and counts
// the removed items in cninet.cleanup.removed as op's.
func (t *Recorder) Cleaned(ctx context.Context, s Span, op Operation, network string, removed []footprint.Item, err error) {
	groups := groupItems(removed)
	for _, g := range groups {
		if !t.metering() {
			break
		}
		t.cleanup.Add(ctx, int64(g.count), metric.WithAttributes(attrOperation.String(op.String()),
			attrNetwork.String(network), attrKind.String(g.kind), attrBackend.String(g.backend)))
	}
	if s.span.IsRecording() {
		describeRemoved(s.span, groups, len(removed), removed)
	}
	s.End(err)
}

// GCDone records what GC removed in cninet.gc.removed and on GC's span:
// removed yields each of the total items, as the cleanup reports them
// (an attachment GC detached with its Backend "cni"); live is how many
// allocations GC was told are live.
func (t *Recorder) GCDone(ctx context.Context, removed iter.Seq[footprint.Item], total, live int) {
	if !t.metering() && !trace.SpanFromContext(ctx).IsRecording() {
		return // a sweep of thousands: copy nothing nobody records
	}
	counts := itemCounts{}
	var first []footprint.Item // the events' items: the rest are only counted
	for it := range removed {
		counts.add(it)
		if len(first) < maxItemEvents {
			first = append(first, it)
		}
	}
	groups := counts.groups()
	for _, g := range groups {
		if !t.metering() {
			break
		}
		t.gcRemoved.Add(ctx, int64(g.count), metric.WithAttributes(attrKind.String(g.kind), attrBackend.String(g.backend)))
	}
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attrLive.Int(live))
		describeRemoved(span, groups, total, first)
	}
}

// TraceSweep runs GC's sweep of networks (all at once: one host read
// serves them all) in a span of its own; removed counts what GC has
// removed so far, before and after the sweep.
func (t *Recorder) TraceSweep(ctx context.Context, networks []string, removed func() int, sweep func() error) error {
	_, s := t.StartSpan(ctx, SpanGCSweep)
	before := removed()
	err := sweep()
	if s.span.IsRecording() {
		s.span.SetAttributes(attrNetworks.StringSlice(networks), attrRemoved.Int(removed()-before))
		if len(networks) == 1 {
			s.span.SetAttributes(attrNetwork.String(networks[0]))
		}
	}
	s.End(err)
	return err
}

// maxItemEvents bounds the events a span gets for removed items: a GC
// after a reboot can remove thousands.
const maxItemEvents = 64

// describeRemoved puts on span how many items were removed (total), by
// kind and backend, and an event for each of the first items.
func describeRemoved(span trace.Span, groups []itemGroup, total int, items []footprint.Item) {
	span.SetAttributes(attrRemoved.Int(total))
	if len(groups) == 0 {
		return
	}
	by := make([]string, len(groups))
	for i, g := range groups {
		by[i] = fmt.Sprintf("%s %s: %d", g.backend, g.kind, g.count)
	}
	span.SetAttributes(attrRemovedBy.StringSlice(by))
	for i, it := range items {
		if i == maxItemEvents {
			break
		}
		span.AddEvent("removed", trace.WithAttributes(attrID.String(it.ID), attrKind.String(itemKind(it)),
			attrBackend.String(itemBackend(it)), attrDetail.String(it.Detail)))
	}
}

// itemGroup is how many removed items share a kind and a backend.
type itemGroup struct {
	kind, backend string
	count         int
}

// groupItems counts items by kind and backend, in a stable order.
func groupItems(items []footprint.Item) []itemGroup {
	counts := itemCounts{}
	for _, it := range items {
		counts.add(it)
	}
	return counts.groups()
}

// itemCounts counts items by kind and backend as they come.
type itemCounts map[[2]string]int

func (c itemCounts) add(it footprint.Item) { c[[2]string{itemKind(it), itemBackend(it)}]++ }

// groups returns the counts in a stable order.
func (c itemCounts) groups() []itemGroup {
	if len(c) == 0 {
		return nil
	}
	groups := make([]itemGroup, 0, len(c))
	for k, n := range c {
		groups = append(groups, itemGroup{kind: k[0], backend: k[1], count: n})
	}
	sort.Slice(groups, func(i, j int) bool {
		if groups[i].backend != groups[j].backend {
			return groups[i].backend < groups[j].backend
		}
		return groups[i].kind < groups[j].kind
	})
	return groups
}

// itemKind is a removed item's cninet.kind: what it was, whatever the
// backend ("rule", "chain", "reservation", "cached_result",
// "cached_attachment").
func itemKind(it footprint.Item) string {
	switch it.Kind {
	case footprint.KindRule, footprint.KindNFTRule:
		return "rule"
	case footprint.KindChain:
		return "chain"
	case footprint.KindReservation:
		return "reservation"
	case footprint.KindCachedResult:
		return "cached_result"
	}
	return strings.ReplaceAll(string(it.Kind), " ", "_")
}

// itemBackend is a removed item's cninet.backend: "iptables",
// "ip6tables", "nftables", "files" (reservations, cached results),
// "links", or "cni" for an attachment GC detached with CNI DEL, as the
// item says; "other" when it says none.
func itemBackend(it footprint.Item) string {
	if it.Backend != "" {
		return it.Backend
	}
	return "other"
}
