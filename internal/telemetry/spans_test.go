package telemetry

import (
	"context"
	"errors"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

// BenchmarkTelemetryWithoutProvider is what the instrumentation of one
// Setup and Teardown (one network, one attempt) costs when the program
// installs no OpenTelemetry provider: compare with cninet's
// BenchmarkSetupTeardown.
func BenchmarkTelemetryWithoutProvider(b *testing.B) {
	t, err := New(Options{ErrorType: func(error) string { return "_OTHER" }, Networks: func() int { return 1 }})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		sctx, setup := t.StartOp(ctx, OpSetup, "bench-1", "/var/run/netns/bench")
		actx, attach := t.StartNetwork(sctx, OpAttach, "nomad", "eth0", "bench-1", "/var/run/netns/bench")
		_, try := t.StartAttempt(actx, "nomad", "eth0", 1, 0)
		try.End(nil)
		attach.End(nil)
		setup.End(nil)
		tctx, teardown := t.StartOp(ctx, OpTeardown, "bench-1", "/var/run/netns/bench")
		dctx, detach := t.StartNetwork(tctx, OpDetach, "nomad", "eth0", "bench-1", "/var/run/netns/bench")
		_, del := t.StartSpan(dctx, SpanDel)
		del.End(nil)
		_, clean := t.StartSpan(dctx, SpanCleanup)
		t.Cleaned(dctx, clean, OpTeardown, "nomad", nil, nil)
		detach.End(nil)
		teardown.End(nil)
	}
}

func TestAFailedSpansErrorTypeIsWhatTheRootClassifies(t *testing.T) {
	boom := errors.New("boom")
	for _, tc := range []struct {
		name     string
		classify func(error) string
		err      error
		want     string // "": no error.type attribute
	}{
		{"a success has no error.type", func(error) string { return "setup_failed" }, nil, ""},
		{"a failure has the classifier's", func(err error) string { return map[bool]string{true: "setup_failed"}[errors.Is(err, boom)] }, boom, "setup_failed"},
		{"without a classifier every failure is _OTHER", nil, boom, "_OTHER"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := tracetest.NewSpanRecorder()
			tel, err := New(Options{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec)), ErrorType: tc.classify})
			if err != nil {
				t.Fatal(err)
			}
			ctx, op := tel.StartOp(context.Background(), OpSetup, "a", "/x")
			_, del := tel.StartSpan(ctx, SpanDel)
			del.End(tc.err)
			op.End(tc.err)
			ended := rec.Ended()
			if len(ended) != 2 {
				t.Fatalf("%d spans ended, want the DEL's and Setup's", len(ended))
			}
			for _, s := range ended {
				got := ""
				for _, kv := range s.Attributes() {
					if kv.Key == attrErrorType {
						got = kv.Value.AsString()
					}
				}
				if got != tc.want {
					t.Errorf("%s: error.type %q, want %q", s.Name(), got, tc.want)
				}
			}
		})
	}
}
