package cninet

import (
	"context"
	"errors"
	"time"

	"github.com/seed1280861d/cninet/internal/footprint"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

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
