package telemetry

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

// The outcomes of a repair (cninet.repairs' cninet.outcome).
const (
	OutcomeRepaired   = "repaired"
	OutcomeFailed     = "failed"
	OutcomeNotInPlace = "not_in_place"
	OutcomeRefused    = "refused" // the watcher's: a drift that keeps coming back
)

// Checked counts what a drift check found missing of one attachment.
func (t *Recorder) Checked(ctx context.Context, h footprint.Health) {
	if !t.metering() || len(h.Missing) == 0 {
		return
	}
	for _, m := range h.Missing {
		t.driftMissing.Add(ctx, 1, metric.WithAttributes(attrNetwork.String(h.Live.Network), attrPlugin.String(m.Plugin),
			attrBackend.String(m.Backend)))
	}
}

// StartRepair starts the span of the repair of allocation id's
// attachment to network as ifName.
func (t *Recorder) StartRepair(ctx context.Context, id, network, ifName string) (context.Context, Span) {
	ctx, span := t.child(ctx, "cninet.repair")
	if !span.IsRecording() && t.tracing() && !trace.SpanFromContext(ctx).SpanContext().IsValid() {
		ctx, span = t.tracer.Start(ctx, "cninet.repair") // the watcher's: a root of its own
	}
	if span.IsRecording() {
		span.SetAttributes(attrID.String(id), attrNetwork.String(network), attrIfName.String(ifName))
	}
	return ctx, Span{t, span}
}

// Repaired counts a repair of an attachment to network by its outcome,
// and puts what it found missing and restored on its span (ended by the
// caller).
func (t *Recorder) Repaired(ctx context.Context, network string, missing, restored int, err error) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(attrMissing.Int(missing), attrRestored.Int(restored))
	}
	t.CountRepair(ctx, network, repairOutcome(err))
}

// CountRepair counts one repair (or one refused) of network in
// cninet.repairs; outcome is one of the Outcome… values.
func (t *Recorder) CountRepair(ctx context.Context, network, outcome string) {
	if t.metering() {
		t.repairs.Add(ctx, 1, metric.WithAttributes(attrNetwork.String(network), attrOutcome.String(outcome)))
	}
}

// repairOutcome is how a repair that returned err ended.
func repairOutcome(err error) string {
	switch {
	case err == nil:
		return OutcomeRepaired
	case errors.Is(err, footprint.ErrNotInPlace):
		return OutcomeNotInPlace
	}
	return OutcomeFailed
}

// RepairedAfter records how long after a firewall change an attachment
// of network was whole again.
func (t *Recorder) RepairedAfter(ctx context.Context, network string, d time.Duration) {
	if t.metering() {
		t.repairLatency.Record(ctx, d.Seconds(), metric.WithAttributes(attrNetwork.String(network)))
	}
}
