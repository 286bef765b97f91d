package telemetry

import (
	"errors"
	"reflect"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	"go.opentelemetry.io/otel/trace"
	tracenoop "go.opentelemetry.io/otel/trace/noop"
)

// Options is what a Recorder is built from: the providers cninet's
// Config names, and what it asks of cninet.
type Options struct {
	// TracerProvider and MeterProvider receive the spans and the
	// metrics. nil: the global ones (otel.GetTracerProvider,
	// otel.GetMeterProvider).
	TracerProvider trace.TracerProvider
	MeterProvider  metric.MeterProvider
	// ErrorType names the error.type of a failed operation's error
	// (never nil): the sentinel it wraps. nil: every error is "_OTHER".
	ErrorType func(error) string
	// Networks counts the known networks at each collection of the
	// cninet.networks gauge. nil: the gauge is not observed.
	Networks func() int
}

// Recorder is a Configurator's tracer and instruments. Its methods cost
// next to nothing while the program has installed no provider, and little
// when it has: child spans start only under a recording span, and metric
// attributes are built once per combination. A nil *Recorder records
// nothing; every method works on it.
type Recorder struct {
	tracer trace.Tracer
	// unsetTP and unsetMP are the global providers' stand-ins, which
	// record nothing until the program installs a provider, when cninet
	// uses the global ones and none was installed yet; else nil.
	unsetTP   trace.TracerProvider
	unsetMP   metric.MeterProvider
	noTraces  bool               // Options.TracerProvider is a no-op one
	noMetrics bool               // Options.MeterProvider is a no-op one
	classify  func(error) string // Options.ErrorType
	instruments
	opts  optCache
	ready readiness
}

// New builds a Recorder's tracer and instruments from o's providers, the
// global ones where o has none. Instruments the provider refuses are
// replaced by no-ops, so the Recorder always works: the error, when not
// nil, only says which metrics will not be recorded (for a warning).
func New(o Options) (*Recorder, error) {
	tp, mp := o.TracerProvider, o.MeterProvider
	t := &Recorder{classify: o.ErrorType}
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
	var errs []error
	t.instruments = newInstruments(mp.Meter(instrumentationName), o.Networks, &t.ready, &errs)
	return t, errors.Join(errs...)
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

// tracing reports whether spans can record now.
func (t *Recorder) tracing() bool {
	return t != nil && !t.noTraces && (t.unsetTP == nil || otel.GetTracerProvider() != t.unsetTP)
}

// metering reports whether measurements can be recorded now.
func (t *Recorder) metering() bool {
	return t != nil && !t.noMetrics && (t.unsetMP == nil || otel.GetMeterProvider() != t.unsetMP)
}

// Close stops observing the gauges.
func (t *Recorder) Close() {
	if t != nil && t.gauges != nil {
		_ = t.gauges.Unregister()
	}
}
