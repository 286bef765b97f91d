package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// The spans without metrics of their own (StartSpan).
const (
	SpanDel      = "cninet.del"
	SpanRollback = "cninet.rollback"
	SpanCleanup  = "cninet.cleanup"
	SpanGCCached = "cninet.gc.cached"
	SpanGCSweep  = "cninet.gc.sweep"
)

// OpSpan is one running operation: its span (perhaps a non-recording
// one) and what its metrics need when it ends.
type OpSpan struct {
	tel     *Recorder
	ctx     context.Context
	span    trace.Span
	op      Operation
	network string
	start   time.Time // zero: no metrics
}

// noSpan is the span of an operation nobody traces. It is never one
// borrowed from ctx: ending that would end the caller's span.
var noSpan = trace.SpanFromContext(context.Background())

// StartOp starts one of the public operations: a span under ctx's and
// the clock for the duration metric. id and netns are empty where the
// operation has none.
func (t *Recorder) StartOp(ctx context.Context, op Operation, id, netns string) (context.Context, OpSpan) {
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

func (t *Recorder) opSpan(ctx context.Context, span trace.Span, op Operation, network string) OpSpan {
	s := OpSpan{tel: t, ctx: ctx, span: span, op: op, network: network}
	if t.metering() {
		s.start = time.Now()
	}
	return s
}

// StartNetwork starts one network's part of an operation; ifName, id
// and netns are empty where the step has none.
func (t *Recorder) StartNetwork(ctx context.Context, op Operation, network, ifName, id, netns string) (context.Context, OpSpan) {
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

// End ends the span, with err recorded and the status set when err is
// not nil, and counts and times the operation.
func (s OpSpan) End(err error) {
	errType := s.tel.endSpan(s.span, err)
	if s.start.IsZero() {
		return
	}
	o := s.tel.opts.get(optKey{op: s.op, network: s.network, errorType: errType})
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
func (t *Recorder) child(ctx context.Context, name string) (context.Context, trace.Span) {
	if !t.tracing() || !trace.SpanFromContext(ctx).IsRecording() {
		return ctx, noSpan
	}
	return t.tracer.Start(ctx, name)
}

// endSpan ends a span with err recorded, and returns err's error.type:
// "" for nil, Options.ErrorType's name for it, or "_OTHER".
func (t *Recorder) endSpan(span trace.Span, err error) string {
	if err == nil {
		if span.IsRecording() {
			span.End()
		}
		return ""
	}
	errType := "_OTHER"
	if t != nil && t.classify != nil {
		errType = t.classify(err)
	}
	if span.IsRecording() {
		span.RecordError(err)
		span.SetStatus(codes.Error, err.Error())
		span.SetAttributes(attrErrorType.String(errType))
		span.End()
	}
	return errType
}

// Span is a span without metrics of its own: one DEL, one cleanup.
type Span struct {
	tel  *Recorder
	span trace.Span
}

// StartSpan starts a child span named name (one of the Span… names).
func (t *Recorder) StartSpan(ctx context.Context, name string) (context.Context, Span) {
	ctx, span := t.child(ctx, name)
	return ctx, Span{t, span}
}

// End ends the span, with err recorded when not nil.
func (s Span) End(err error) { s.tel.endSpan(s.span, err) }

// StartAttempt starts ADD attempt number attempt of network as ifName,
// which waited waited after the previous attempt failed.
func (t *Recorder) StartAttempt(ctx context.Context, network, ifName string, attempt int, waited time.Duration) (context.Context, AttemptSpan) {
	ctx, span := t.child(ctx, "cninet.add")
	if span.IsRecording() {
		span.SetAttributes(attrNetwork.String(network), attrIfName.String(ifName), attrAttempt.Int(attempt))
		if attempt > 1 {
			span.SetAttributes(attrBackoff.Float64(waited.Seconds()))
		}
	}
	return ctx, AttemptSpan{tel: t, ctx: ctx, span: span, network: network, attempt: attempt}
}

// AttemptSpan is one ADD attempt: its span and its count.
type AttemptSpan struct {
	tel     *Recorder
	ctx     context.Context
	span    trace.Span
	network string
	attempt int
}

// End ends the attempt's span and counts it.
func (s AttemptSpan) End(err error) {
	errType := s.tel.endSpan(s.span, err)
	if !s.tel.metering() {
		return
	}
	o := s.tel.opts.get(optKey{op: OpAttach, network: s.network, errorType: errType})
	s.tel.attempts.Add(s.ctx, 1, o.add...)
	if s.attempt > 1 {
		s.tel.retries.Add(s.ctx, 1, s.tel.opts.get(optKey{op: OpAttach, network: s.network}).add...)
	}
}
