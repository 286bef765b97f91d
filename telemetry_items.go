package cninet

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/seed1280861d/cninet/internal/footprint"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

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
// "ip6tables", "nftables", "files" (reservations, cached results), or
// "cni" for an attachment GC detached with CNI DEL. The cleaner's item
// says it only in its Detail's first word, for now.
func itemBackend(it footprint.Item) string {
	switch {
	case it.Backend != "":
		return it.Backend
	case it.Kind == footprint.Kind(GCCachedAttachment), it.Kind == footprint.Kind(GCRecordedAttachment):
		return "cni"
	}
	return "other"
}

// What drift checks and repairs report: cninet.drift.missing per missing
// piece (by network, plugin and backend), cninet.repairs per repair (by
// outcome), cninet.repair.latency from a firewall change to the
// attachment whole again (the watcher), and a cninet.repair span per
// repair naming what it restored.

// The outcomes of a repair (cninet.repairs).
const (
	outcomeRepaired   = "repaired"
	outcomeFailed     = "failed"
	outcomeNotInPlace = "not_in_place"
	outcomeRefused    = "refused" // the watcher's: a drift that keeps coming back
)

// checked counts what a drift check found missing of one attachment.
func (t *telemetry) checked(ctx context.Context, h footprint.Health) {
	if !t.metering() || len(h.Missing) == 0 {
		return
	}
	for _, m := range h.Missing {
		t.driftMissing.Add(ctx, 1, metric.WithAttributes(attrNetwork.String(h.Live.Network), attrPlugin.String(m.Plugin),
			attrBackend.String(m.Backend)))
	}
}

// startRepair starts the span of one attachment's repair.
func (t *telemetry) startRepair(ctx context.Context, a *footprint.Live) (context.Context, childSpan) {
	ctx, span := t.child(ctx, "cninet.repair")
	if !span.IsRecording() && t.tracing() && !trace.SpanFromContext(ctx).SpanContext().IsValid() {
		ctx, span = t.tracer.Start(ctx, "cninet.repair") // the watcher's: a root of its own
	}
	if span.IsRecording() {
		span.SetAttributes(attrID.String(a.ID), attrNetwork.String(a.Network), attrIfName.String(a.IfName))
	}
	return ctx, childSpan{span}
}

// repaired counts a repair by its outcome, and puts what it found and
// restored on its span (ended by the caller).
func (t *telemetry) repaired(ctx context.Context, a *footprint.Live, missing, restored int, err error) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attrMissing.Int(missing), attrRestored.Int(restored))
	}
	t.countRepair(ctx, a.Network, repairOutcome(err))
}

// countRepair counts one repair (or one refused) in cninet.repairs.
func (t *telemetry) countRepair(ctx context.Context, network, outcome string) {
	if t.metering() {
		t.repairs.Add(ctx, 1, metric.WithAttributes(attrNetwork.String(network), attrOutcome.String(outcome)))
	}
}

// repairOutcome is how a repair that returned err ended.
func repairOutcome(err error) string {
	switch {
	case err == nil:
		return outcomeRepaired
	case errors.Is(err, footprint.ErrNotInPlace):
		return outcomeNotInPlace
	}
	return outcomeFailed
}

// repairedAfter records how long after a firewall change an attachment
// was whole again.
func (t *telemetry) repairedAfter(ctx context.Context, network string, d time.Duration) {
	if t.metering() {
		t.repairLatency.Record(ctx, d.Seconds(), metric.WithAttributes(attrNetwork.String(network)))
	}
}
