package telemetry

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// instruments creates cninet's instruments on m, each one m refuses
// replaced by a no-op and its error added to errs; networks is what the
// cninet.networks gauge observes.
func (t *Recorder) instruments(m metric.Meter, networks func() int, errs *[]error) {
	t.operations = counter(m, errs, "cninet.operations", "{operation}", "Calls of Setup, Teardown, Check, Status, GC and Reload.")
	t.duration = histogram(m, errs, "cninet.operation.duration", "How long calls of Setup, Teardown, Check, Status, GC and Reload took.")
	t.netOperations = counter(m, errs, "cninet.network.operations", "{operation}", "Per-network steps of an operation: attach, detach, check, status, gc.")
	t.netDuration = histogram(m, errs, "cninet.network.operation.duration", "How long one network's attach, detach, check, status or gc took.")
	t.attempts = counter(m, errs, "cninet.add.attempts", "{attempt}", "CNI ADD attempts, the first included.")
	t.retries = counter(m, errs, "cninet.add.retries", "{attempt}", "CNI ADD attempts after the first: ADD failed and was retried.")
	t.cleanup = counter(m, errs, "cninet.cleanup.removed", "{item}", "Items the force cleanup removed after a CNI DEL: state the plugins left behind.")
	t.gcRemoved = counter(m, errs, "cninet.gc.removed", "{item}", "Items GC removed: stale attachments and their state.")
	t.driftMissing = counter(m, errs, "cninet.drift.missing", "{item}", "Pieces of live attachments' footprints a drift check found missing (Check, the repair watcher).")
	t.repairs = counter(m, errs, "cninet.repairs", "{repair}", "Repairs of live attachments, by outcome: repaired, failed, not_in_place, refused (a drift that keeps coming back).")
	t.repairLatency = histogram(m, errs, "cninet.repair.latency", "The repair watcher's time from a firewall change to the attachment whole again.")
	t.keptAtts = counter(m, errs, "cninet.kept", "{attachment}",
		"Attachments a DEL or GC left alone that it was asked to remove or could have collected: another owner's whose namespace lives, state no record claims whose namespace lives, an unreadable record's.")
	t.gauges = t.registerGauges(m, networks, errs)
}

// registerGauges observes the known networks (networks) and their
// readiness at each collection.
func (t *Recorder) registerGauges(m metric.Meter, networks func() int, errs *[]error) metric.Registration {
	known, err1 := m.Int64ObservableGauge("cninet.networks", metric.WithUnit("{network}"),
		metric.WithDescription("Networks the Configurator knows (ConfList, ConfLists, ConfDir)."))
	ready, err2 := m.Int64ObservableGauge("cninet.network.ready", metric.WithUnit("{network}"),
		metric.WithDescription("1 when the network's last Status found it ready, 0 when not."))
	if err := errors.Join(err1, err2); err != nil {
		*errs = append(*errs, err)
		return nil
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if networks != nil {
			o.ObserveInt64(known, int64(networks()))
		}
		for name, ok := range t.readiness() {
			o.ObserveInt64(ready, boolInt(ok), metric.WithAttributes(attrNetwork.String(name)))
		}
		return nil
	}, known, ready)
	if err != nil {
		*errs = append(*errs, err)
	}
	return reg
}

func counter(m metric.Meter, errs *[]error, name, unit, desc string) metric.Int64Counter {
	inst, err := m.Int64Counter(name, metric.WithUnit(unit), metric.WithDescription(desc))
	if err != nil || inst == nil {
		*errs = append(*errs, err)
		inst, _ = noopMeter.Int64Counter(name)
	}
	return inst
}

func histogram(m metric.Meter, errs *[]error, name, desc string) metric.Float64Histogram {
	inst, err := m.Float64Histogram(name, metric.WithUnit("s"), metric.WithDescription(desc),
		metric.WithExplicitBucketBoundaries(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))
	if err != nil || inst == nil {
		*errs = append(*errs, err)
		inst, _ = noopMeter.Float64Histogram(name)
	}
	return inst
}

// noopMeter stands in for instruments a provider refuses.
var noopMeter = noop.NewMeterProvider().Meter(instrumentationName)

// NoteReady records Status's verdict on one network for cninet.network.ready.
func (t *Recorder) NoteReady(network string, err error) {
	if t == nil {
		return
	}
	t.mu.Lock()
	t.ready[network] = err == nil
	t.mu.Unlock()
}

func (t *Recorder) readiness() map[string]bool {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make(map[string]bool, len(t.ready))
	for k, v := range t.ready {
		out[k] = v
	}
	return out
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// optKey is one combination of the operation metrics' attributes.
type optKey struct {
	op                 Operation
	network, errorType string
}

// measureOpts are the attribute options of one optKey, built once: the
// metric API would otherwise build and sort an attribute set per call.
type measureOpts struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

func (t *Recorder) optsFor(k optKey) measureOpts {
	t.mu.RLock()
	o, ok := t.opts[k]
	t.mu.RUnlock()
	if ok {
		return o
	}
	attrs := []attribute.KeyValue{attrOperation.String(k.op.String())}
	if k.network != "" {
		attrs = append(attrs, attrNetwork.String(k.network))
	}
	if k.errorType != "" {
		attrs = append(attrs, attrErrorType.String(k.errorType))
	}
	set := metric.WithAttributeSet(attribute.NewSet(attrs...))
	o = measureOpts{add: []metric.AddOption{set}, record: []metric.RecordOption{set}}
	t.mu.Lock()
	if len(t.opts) < maxOptCombinations { // networks come and go with Reload: stay bounded
		t.opts[k] = o
	}
	t.mu.Unlock()
	return o
}

const maxOptCombinations = 4096

// The reasons an attachment was kept (cninet.kept's cninet.reason).
const (
	KeptOtherOwners = "another owner's, namespace alive"
	KeptUnrecorded  = "no record, namespace alive"
	KeptUnreadable  = "unreadable record"
)

// Kept counts an attachment of network left alone for reason (one of
// the Kept… reasons).
func (t *Recorder) Kept(ctx context.Context, reason, network string) {
	if !t.metering() {
		return
	}
	t.keptAtts.Add(ctx, 1, metric.WithAttributes(attrReason.String(reason), attrNetwork.String(network)))
}
