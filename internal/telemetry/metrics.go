package telemetry

import (
	"context"
	"errors"
	"maps"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// instruments are cninet's instruments, made once by New.
type instruments struct {
	operations    metric.Int64Counter     // cninet.operations
	duration      metric.Float64Histogram // cninet.operation.duration
	netOperations metric.Int64Counter     // cninet.network.operations
	netDuration   metric.Float64Histogram // cninet.network.operation.duration
	attempts      metric.Int64Counter     // cninet.add.attempts
	retries       metric.Int64Counter     // cninet.add.retries
	cleanup       metric.Int64Counter     // cninet.cleanup.removed
	gcRemoved     metric.Int64Counter     // cninet.gc.removed
	driftMissing  metric.Int64Counter     // cninet.drift.missing
	repairs       metric.Int64Counter     // cninet.repairs
	repairLatency metric.Float64Histogram // cninet.repair.latency
	keptAtts      metric.Int64Counter     // cninet.kept
	gauges        metric.Registration     // cninet.networks, cninet.network.ready
}

// newInstruments creates cninet's instruments on m, each one m refuses
// replaced by a no-op and its error added to errs; the gauges observe
// networks and ready.
func newInstruments(m metric.Meter, networks func() int, ready *readiness, errs *[]error) instruments {
	return instruments{
		operations:    counter(m, errs, "cninet.operations", "{operation}", "Calls of Setup, Teardown, Check, Status, GC and Reload."),
		duration:      histogram(m, errs, "cninet.operation.duration", "How long calls of Setup, Teardown, Check, Status, GC and Reload took."),
		netOperations: counter(m, errs, "cninet.network.operations", "{operation}", "Per-network steps of an operation: attach, detach, check, status, gc."),
		netDuration:   histogram(m, errs, "cninet.network.operation.duration", "How long one network's attach, detach, check, status or gc took."),
		attempts:      counter(m, errs, "cninet.add.attempts", "{attempt}", "CNI ADD attempts, the first included."),
		retries:       counter(m, errs, "cninet.add.retries", "{attempt}", "CNI ADD attempts after the first: ADD failed and was retried."),
		cleanup:       counter(m, errs, "cninet.cleanup.removed", "{item}", "Items the force cleanup removed after a CNI DEL: state the plugins left behind."),
		gcRemoved:     counter(m, errs, "cninet.gc.removed", "{item}", "Items GC removed: stale attachments and their state."),
		driftMissing:  counter(m, errs, "cninet.drift.missing", "{item}", "Pieces of live attachments' footprints a drift check found missing (Check, the repair watcher)."),
		repairs:       counter(m, errs, "cninet.repairs", "{repair}", "Repairs of live attachments, by outcome: repaired, failed, not_in_place, refused (a drift that keeps coming back)."),
		repairLatency: histogram(m, errs, "cninet.repair.latency", "The repair watcher's time from a firewall change to the attachment whole again."),
		keptAtts: counter(m, errs, "cninet.kept", "{attachment}",
			"Attachments a DEL or GC left alone that it was asked to remove or could have collected: another owner's whose namespace lives, state no record claims whose namespace lives, an unreadable record's."),
		gauges: registerGauges(m, networks, ready, errs),
	}
}

// registerGauges observes the known networks (networks) and their
// readiness at each collection.
func registerGauges(m metric.Meter, networks func() int, ready *readiness, errs *[]error) metric.Registration {
	known, err1 := m.Int64ObservableGauge("cninet.networks", metric.WithUnit("{network}"),
		metric.WithDescription("Networks the Configurator knows (ConfList, ConfLists, ConfDir)."))
	isReady, err2 := m.Int64ObservableGauge("cninet.network.ready", metric.WithUnit("{network}"),
		metric.WithDescription("1 when the network's last Status found it ready, 0 when not."))
	if err := errors.Join(err1, err2); err != nil {
		*errs = append(*errs, err)
		return nil
	}
	reg, err := m.RegisterCallback(func(_ context.Context, o metric.Observer) error {
		if networks != nil {
			o.ObserveInt64(known, int64(networks()))
		}
		for name, ok := range ready.snapshot() {
			o.ObserveInt64(isReady, boolInt(ok), metric.WithAttributes(attrNetwork.String(name)))
		}
		return nil
	}, known, isReady)
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
	if t != nil {
		t.ready.note(network, err == nil)
	}
}

// readiness is each network's last Status verdict (cninet.network.ready).
type readiness struct {
	mu    sync.RWMutex
	ready map[string]bool
}

func (r *readiness) note(network string, ready bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ready == nil {
		r.ready = map[string]bool{}
	}
	r.ready[network] = ready
}

func (r *readiness) snapshot() map[string]bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return maps.Clone(r.ready)
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

// measureOpts are the attribute options of one optKey.
type measureOpts struct {
	add    []metric.AddOption
	record []metric.RecordOption
}

// optCache holds each optKey's measureOpts, built once: the metric API
// would otherwise build and sort an attribute set per call.
type optCache struct {
	mu sync.RWMutex
	m  map[optKey]measureOpts
}

func (c *optCache) get(k optKey) measureOpts {
	c.mu.RLock()
	o, ok := c.m[k]
	c.mu.RUnlock()
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
	c.mu.Lock()
	if c.m == nil {
		c.m = map[optKey]measureOpts{}
	}
	if len(c.m) < maxOptCombinations { // networks come and go with Reload: stay bounded
		c.m[k] = o
	}
	c.mu.Unlock()
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
