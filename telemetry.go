package cninet

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"time"

	"github.com/seed1280861d/cninet/internal/footprint"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// instrumentationName names cninet's tracer and meter.
const instrumentationName = "github.com/seed1280861d/cninet"

// The attributes cninet sets. The cni.* keys are go-cni's, for the same
// meaning, so one query finds both libraries' spans.
const (
	attrID        = attribute.Key("cni.id")          // the allocation (container) id
	attrPath      = attribute.Key("cni.path")        // the network namespace path
	attrIfName    = attribute.Key("cni.ifname")      // the workload's interface in the network
	attrNetwork   = attribute.Key("cni.name")        // the network (conflist) name
	attrNetworks  = attribute.Key("cninet.networks") // the networks a GC sweep covered
	attrOperation = attribute.Key("cninet.operation")
	attrAttempt   = attribute.Key("cninet.attempt")    // 1 for the first ADD
	attrBackoff   = attribute.Key("cninet.backoff")    // seconds waited before this ADD
	attrKind      = attribute.Key("cninet.kind")       // what a removed item was
	attrBackend   = attribute.Key("cninet.backend")    // where it was
	attrRemoved   = attribute.Key("cninet.removed")    // how many items were removed
	attrRemovedBy = attribute.Key("cninet.removed_by") // "<backend> <kind>: <count>", one per group
	attrDetail    = attribute.Key("cninet.detail")     // the removed rule, chain or file
	attrLive      = attribute.Key("cninet.live")       // GC: how many allocations are live
	attrReason    = attribute.Key("cninet.reason")     // why an attachment was kept (cninet.kept)
	attrErrorType = attribute.Key("error.type")        // the sentinel a failure wraps
	attrPlugin    = attribute.Key("cninet.plugin")     // whose footprint a missing piece is
	attrOutcome   = attribute.Key("cninet.outcome")    // how a repair ended
	attrMissing   = attribute.Key("cninet.missing")    // how many pieces a check found missing
	attrRestored  = attribute.Key("cninet.restored")   // how many a repair restored
)

// operation is what a span and the operation metrics are about.
type operation int

const (
	opSetup operation = iota
	opTeardown
	opCheck
	opStatus
	opGC
	opReload
	opConnect
	opDisconnect
	// Per network, inside one of the above.
	opAttach
	opDetach
	opCheckNetwork
	opStatusNetwork
)

var operations = [...]struct{ name, span string }{
	opSetup:         {"setup", "cninet.Setup"},
	opTeardown:      {"teardown", "cninet.Teardown"},
	opCheck:         {"check", "cninet.Check"},
	opStatus:        {"status", "cninet.Status"},
	opGC:            {"gc", "cninet.GC"},
	opReload:        {"reload", "cninet.Reload"},
	opConnect:       {"connect", "cninet.Connect"},
	opDisconnect:    {"disconnect", "cninet.Disconnect"},
	opAttach:        {"attach", "cninet.attach"},
	opDetach:        {"detach", "cninet.detach"},
	opCheckNetwork:  {"check", "cninet.check"},
	opStatusNetwork: {"status", "cninet.status"},
}

func (o operation) String() string { return operations[o].name }

// telemetry is a Configurator's tracer and instruments. Its methods cost
// next to nothing while the program has installed no provider, and little
// when it has: child spans start only under a recording span, and metric
// attributes are built once per combination.
type telemetry struct {
	tracer trace.Tracer
	// unsetTP and unsetMP are the global providers' stand-ins, which
	// record nothing until the program installs a provider, when cninet
	// uses the global ones and none was installed yet; else nil.
	unsetTP       trace.TracerProvider
	unsetMP       metric.MeterProvider
	noTraces      bool                    // Config.TracerProvider is a no-op one
	noMetrics     bool                    // Config.MeterProvider is a no-op one
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

	mu    sync.RWMutex
	opts  map[optKey]measureOpts
	ready map[string]bool // the last Status's verdict per network
}

// newTelemetry builds c's tracer and instruments from the providers in
// cfg, the global ones where cfg has none. Instruments the provider
// refuses are replaced by no-ops: telemetry never fails New.
func newTelemetry(cfg Config, c *Configurator) *telemetry {
	tp, mp := cfg.TracerProvider, cfg.MeterProvider
	t := &telemetry{opts: map[optKey]measureOpts{}, ready: map[string]bool{}}
	_, t.noTraces = tp.(tracenoop.TracerProvider)
	_, t.noMetrics = mp.(noop.MeterProvider)
	if tp == nil {
		tp = otel.GetTracerProvider()
		if isGlobalStandIn(tp) {
			t.unsetTP = tp
		}
	}
	if mp == nil {
		mp = otel.GetMeterProvider()
		if isGlobalStandIn(mp) {
			t.unsetMP = mp
		}
	}
	t.tracer = tp.Tracer(instrumentationName)
	t.instruments(mp.Meter(instrumentationName), c)
	return t
}

// isGlobalStandIn reports whether p is what otel.GetTracerProvider or
// GetMeterProvider return before the program installs a provider: it
// records nothing until then and forwards to the installed one after.
// Should a new OpenTelemetry release name it differently, cninet merely
// loses the shortcut.
func isGlobalStandIn(p any) bool {
	typ := reflect.TypeOf(p)
	return typ != nil && typ.Kind() == reflect.Pointer && typ.Elem().PkgPath() == "go.opentelemetry.io/otel/internal/global"
}

// tracing reports whether spans can record now. A Configurator not made
// by New has no telemetry: nothing records.
func (t *telemetry) tracing() bool {
	return t != nil && !t.noTraces && (t.unsetTP == nil || otel.GetTracerProvider() != t.unsetTP)
}

// opSpan is one running operation: its span (perhaps a non-recording
// one) and what its metrics need when it ends.
type opSpan struct {
	tel     *telemetry
	ctx     context.Context
	span    trace.Span
	op      operation
	network string
	start   time.Time // zero: no metrics
}

// noSpan is the span of an operation nobody traces. It is never one
// borrowed from ctx: ending that would end the caller's span.
var noSpan = trace.SpanFromContext(context.Background())

// startOp starts one of the public operations: a span under ctx's and
// the clock for the duration metric. id and netns are empty where the
// operation has none.
func (t *telemetry) startOp(ctx context.Context, op operation, id, netns string) (context.Context, opSpan) {
	span := noSpan
	if t.tracing() {
		ctx, span = t.tracer.Start(ctx, operations[op].span)
	}
	if span.IsRecording() {
		span.SetAttributes(attrOperation.String(op.String()))
		setIDs(span, id, netns)
	}
	return ctx, t.opSpan(ctx, span, op, "")
}

func (t *telemetry) opSpan(ctx context.Context, span trace.Span, op operation, network string) opSpan {
	s := opSpan{tel: t, ctx: ctx, span: span, op: op, network: network}
	if t.metering() {
		s.start = time.Now()
	}
	return s
}

// startNetwork starts one network's part of an operation; ifName, id
// and netns are empty where the step has none.
func (t *telemetry) startNetwork(ctx context.Context, op operation, network, ifName, id, netns string) (context.Context, opSpan) {
	ctx, span := t.child(ctx, operations[op].span)
	if span.IsRecording() {
		span.SetAttributes(attrOperation.String(op.String()), attrNetwork.String(network))
		if ifName != "" {
			span.SetAttributes(attrIfName.String(ifName))
		}
		setIDs(span, id, netns)
	}
	return ctx, t.opSpan(ctx, span, op, network)
}

func setIDs(span trace.Span, id, netns string) {
	if id != "" {
		span.SetAttributes(attrID.String(id))
	}
	if netns != "" {
		span.SetAttributes(attrPath.String(netns))
	}
}

// end ends the span, with err recorded and the status set when err is
// not nil, and counts and times the operation.
func (s opSpan) end(err error) {
	errType := endSpan(s.span, err)
	if s.start.IsZero() {
		return
	}
	o := s.tel.optsFor(optKey{op: s.op, network: s.network, errorType: errType})
	secs := time.Since(s.start).Seconds()
	if s.network == "" {
		s.tel.operations.Add(s.ctx, 1, o.add...)
		s.tel.duration.Record(s.ctx, secs, o.record...)
	} else {
		s.tel.netOperations.Add(s.ctx, 1, o.add...)
		s.tel.netDuration.Record(s.ctx, secs, o.record...)
	}
}

// child starts a span under ctx's when that one records; otherwise
// nothing is built for nobody.
func (t *telemetry) child(ctx context.Context, name string) (context.Context, trace.Span) {
	if !t.tracing() || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, noSpan
	}
	return t.tracer.Start(ctx, name)
}

// endSpan ends a span with err recorded, and returns err's error.type,
// "" for nil.
func endSpan(span trace.Span, err error) string {
	errType := errorType(err)
	if !span.IsRecording() {
		return errType
	}
	if err != nil {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(attrErrorType.String(errType))
	}
	span.End()
	return errType
}

// childSpan is a span without metrics of its own: one DEL, one cleanup.
type childSpan struct{ span trace.Span }

// startSpan starts a child span named name (one of the span names below).
func (t *telemetry) startSpan(ctx context.Context, name string) (context.Context, childSpan) {
	ctx, span := t.child(ctx, name)
	return ctx, childSpan{span}
}

func (s childSpan) end(err error) { endSpan(s.span, err) }

// The spans without metrics of their own.
const (
	spanDel      = "cninet.del"
	spanRollback = "cninet.rollback"
	spanCleanup  = "cninet.cleanup"
	spanGCCached = "cninet.gc.cached"
	spanGCSweep  = "cninet.gc.sweep"
)

// allocID is alloc's id for a span, before alloc is validated.
func allocID(alloc *Allocation) string {
	if alloc == nil {
		return ""
	}
	return alloc.ID
}

// startAttempt starts ADD attempt number attempt of network n, which
// waited waited after the previous attempt failed.
func (t *telemetry) startAttempt(ctx context.Context, att attachment, attempt int, waited time.Duration) (context.Context, attemptSpan) {
	ctx, span := t.child(ctx, "cninet.add")
	if span.IsRecording() {
		span.SetAttributes(attrNetwork.String(att.name()), attrIfName.String(att.ifName), attrAttempt.Int(attempt))
		if attempt > 1 {
			span.SetAttributes(attrBackoff.Float64(waited.Seconds()))
		}
	}
	return ctx, attemptSpan{tel: t, ctx: ctx, span: span, network: att.name(), attempt: attempt}
}

type attemptSpan struct {
	tel     *telemetry
	ctx     context.Context
	span    trace.Span
	network string
	attempt int
}

// end ends the attempt's span and counts it.
func (s attemptSpan) end(err error) {
	errType := endSpan(s.span, err)
	if !s.tel.metering() {
		return
	}
	o := s.tel.optsFor(optKey{op: opAttach, network: s.network, errorType: errType})
	s.tel.attempts.Add(s.ctx, 1, o.add...)
	if s.attempt > 1 {
		s.tel.retries.Add(s.ctx, 1, s.tel.optsFor(optKey{op: opAttach, network: s.network}).add...)
	}
}

// cleaned ends a cleanup span with what the cleanup removed, and counts
// the removed items in cninet.cleanup.removed as op's.
func (t *telemetry) cleaned(ctx context.Context, s childSpan, op operation, network string, removed []footprint.Item, err error) {
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
	s.end(err)
}

// gcDone records what GC removed in cninet.gc.removed and on GC's span.
func (t *telemetry) gcDone(ctx context.Context, report *GCReport, live int) {
	if report == nil || (!t.metering() && !trace.SpanFromContext(ctx).IsRecording()) {
		return // a sweep of thousands: copy nothing nobody records
	}
	counts := itemCounts{}
	var first []footprint.Item // the events' items: the rest are only counted
	for it := range report.All() {
		fi := footprint.Item{Kind: footprint.Kind(it.Kind), ID: it.ID, Network: it.Network, Backend: it.Backend, Detail: it.Detail}
		counts.add(fi)
		if len(first) < maxItemEvents {
			first = append(first, fi)
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
		describeRemoved(span, groups, report.Len(), first)
	}
}

// traceSweep runs GC's sweep of networks (all at once: one host read
// serves them all) in a span of its own.
func (t *telemetry) traceSweep(ctx context.Context, networks []string, report *GCReport, sweep func() error) error {
	_, s := t.startSpan(ctx, spanGCSweep)
	before := report.Len()
	err := sweep()
	if s.span.IsRecording() {
		s.span.SetAttributes(attrNetworks.StringSlice(networks), attrRemoved.Int(report.Len()-before))
		if len(networks) == 1 {
			s.span.SetAttributes(attrNetwork.String(networks[0]))
		}
	}
	s.end(err)
	return err
}

// maxItemEvents bounds the events a span gets for removed items: a GC
// after a reboot can remove thousands.
const maxItemEvents = 64

// errorType is err's error.type: the name of the first sentinel it wraps,
// the context's error, or "_OTHER"; "" for nil.
func errorType(err error) string {
	if err == nil {
		return ""
	}
	for _, s := range errorTypes {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	return "_OTHER"
}

// errorTypes are checked in order: the most specific first.
var errorTypes = []struct {
	err  error
	name string
}{
	{context.DeadlineExceeded, "timeout"},
	{context.Canceled, "canceled"},
	{ErrInvalidAllocation, "invalid_allocation"},
	{ErrInvalidArgument, "invalid_argument"},
	{ErrNetworkNotFound, "network_not_found"},
	{ErrPluginMissing, "plugin_missing"},
	{ErrInvalidConfig, "invalid_config"},
	{ErrNoAddress, "no_address"},
	{ErrCheckFailed, "check_failed"},
	{ErrCheckUnsupported, "check_unsupported"},
	{ErrIPTablesMissing, "iptables_missing"},
	{ErrCleanupFailed, "cleanup_failed"},
	{ErrSetupFailed, "setup_failed"},
	{ErrNotReady, "not_ready"},
	{ErrClosed, "closed"},
	{ErrIO, "io"},
}
