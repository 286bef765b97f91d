package telemetry

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/internal/footprint"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
)

// A Configurator made without New (as some of cninet's tests do) has no
// Recorder; every hook must still work.
func TestANilRecorderRecordsNothingAndEveryHookWorks(t *testing.T) {
	var tel *Recorder
	ctx, op := tel.StartOp(context.Background(), OpSetup, "a", "/x")
	nctx, nop := tel.StartNetwork(ctx, OpAttach, "nomad", "eth0", "a", "/x")
	_, try := tel.StartAttempt(nctx, "nomad", "eth0", 2, 1)
	try.End(errors.New("boom"))
	_, span := tel.StartSpan(nctx, SpanCleanup)
	tel.Cleaned(nctx, span, OpTeardown, "nomad", []footprint.Item{{Kind: footprint.KindRule, Detail: "iptables x"}}, nil)
	nop.End(nil)
	op.End(nil)
	tel.NoteReady("nomad", nil)
	tel.Kept(ctx, KeptUnreadable, "nomad")
	tel.GCDone(ctx, slices.Values([]footprint.Item{{Kind: footprint.KindRule}}), 1, 0)
	if err := tel.TraceSweep(ctx, []string{"nomad"}, func() int { return 0 }, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	rctx, repair := tel.StartRepair(ctx, "a", "nomad", "eth0")
	tel.Repaired(rctx, "nomad", 1, 1, nil)
	repair.End(nil)
	tel.Close()
	if tel.tracing() || tel.metering() {
		t.Error("no telemetry, yet it claims to record")
	}
}

// refusingMeter refuses every counter, as a provider may refuse an
// instrument whose name or unit it rejects.
type refusingMeter struct{ metric.Meter }

func (refusingMeter) Int64Counter(name string, _ ...metric.Int64CounterOption) (metric.Int64Counter, error) {
	return nil, errors.New("refused " + name)
}

type refusingProvider struct{ metric.MeterProvider }

func (refusingProvider) Meter(string, ...metric.MeterOption) metric.Meter {
	return refusingMeter{noop.NewMeterProvider().Meter("")}
}

func TestNewSaysWhichInstrumentsTheProviderRefusedAndWorksRegardless(t *testing.T) {
	tel, err := New(Options{MeterProvider: refusingProvider{}})
	if err == nil || !strings.Contains(err.Error(), "refused cninet.operations") || !strings.Contains(err.Error(), "refused cninet.kept") {
		t.Fatalf("New's error %v: want each refused counter named", err)
	}
	if strings.Contains(err.Error(), "cninet.operation.duration") {
		t.Errorf("New's error %v names a histogram the provider made", err)
	}
	ctx, op := tel.StartOp(context.Background(), OpSetup, "a", "/x")
	tel.Kept(ctx, KeptUnrecorded, "nomad")
	op.End(errors.New("boom")) // the no-op stand-ins count it: no panic
	tel.Close()
}
