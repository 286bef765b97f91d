package cninet

import (
	"fmt"
	"sort"
	"strings"

	"github.com/seed1280861d/cninet/internal/footprint"
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
