package cninet

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/footprint"
)

func TestErrorTypeNamesTheMostSpecificSentinel(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"no error has none", nil, ""},
		{"a Setup that ran out of time", fmt.Errorf("%w: after 2 attempt(s): %w", ErrSetupFailed, context.DeadlineExceeded), "timeout"},
		{"a Setup whose plugin failed", fmt.Errorf("%w: plugin said no", ErrSetupFailed), "setup_failed"},
		{"a Status that misses a plugin", fmt.Errorf("%w: %w: bridge", ErrNotReady, ErrPluginMissing), "plugin_missing"},
		{"a cleanup without iptables", fmt.Errorf("%w: %w", ErrCleanupFailed, ErrIPTablesMissing), "iptables_missing"},
		{"a plugin's own error", errors.New("bridge: device busy"), "_OTHER"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := errorType(tc.err); got != tc.want {
				t.Errorf("errorType = %q, want %q", got, tc.want)
			}
		})
	}
}

// BenchmarkTelemetryWithoutProvider is what the instrumentation of one
// Setup and Teardown (one network, one attempt) costs when the program
// installs no OpenTelemetry provider: compare with BenchmarkSetupTeardown.
func BenchmarkTelemetryWithoutProvider(b *testing.B) {
	c := &Configurator{logger: hclog.NewNullLogger()}
	t := newTelemetry(Config{}, c)
	att := attachment{conf: catalog.Conf{Info: catalog.Info{Name: "nomad"}}, ifName: "eth0"}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		sctx, setup := t.startOp(ctx, opSetup, "bench-1", "/var/run/netns/bench")
		actx, attach := t.startNetwork(sctx, opAttach, att.name(), att.ifName, "bench-1", "/var/run/netns/bench")
		_, try := t.startAttempt(actx, att, 1, 0)
		try.end(nil)
		attach.end(nil)
		setup.end(nil)
		tctx, teardown := t.startOp(ctx, opTeardown, "bench-1", "/var/run/netns/bench")
		dctx, detach := t.startNetwork(tctx, opDetach, att.name(), att.ifName, "bench-1", "/var/run/netns/bench")
		_, del := t.startSpan(dctx, spanDel)
		del.end(nil)
		_, clean := t.startSpan(dctx, spanCleanup)
		t.cleaned(dctx, clean, opTeardown, att.name(), nil, nil)
		detach.end(nil)
		teardown.end(nil)
	}
}

// A Configurator made without New (as some tests do) has no telemetry;
// every hook must still work.
func TestHooksWorkWithoutTelemetry(t *testing.T) {
	var tel *telemetry
	ctx, op := tel.startOp(context.Background(), opSetup, "a", "/x")
	nctx, nop := tel.startNetwork(ctx, opAttach, "nomad", "eth0", "a", "/x")
	_, try := tel.startAttempt(nctx, attachment{}, 2, 1)
	try.end(errors.New("boom"))
	_, span := tel.startSpan(nctx, spanCleanup)
	tel.cleaned(nctx, span, opTeardown, "nomad", []footprint.Item{{Kind: footprint.KindRule, Detail: "iptables x"}}, nil)
	nop.end(nil)
	op.end(nil)
	tel.noteReady("nomad", nil)
	tel.gcDone(ctx, &GCReport{}, 0)
	if err := tel.traceSweep(ctx, []string{"nomad"}, &GCReport{}, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	tel.close()
	if tel.tracing() || tel.metering() {
		t.Error("no telemetry, yet it claims to record")
	}
}
