package cninet

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/internal/footprint"
)

func TestRemovedItemsAreCountedByKindAndBackend(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		item                  footprint.Item
		wantKind, wantBackend string
	}{
		{"an iptables rule", footprint.Item{Kind: footprint.KindRule, Backend: "iptables", Detail: "iptables -t nat -D POSTROUTING -s 198.18.0.2/32 -j CNI-x"}, "rule", "iptables"},
		{"an ip6tables chain", footprint.Item{Kind: footprint.KindChain, Backend: "ip6tables", Detail: "ip6tables -t nat -X CNI-x"}, "chain", "ip6tables"},
		{"an nftables rule", footprint.Item{Kind: footprint.KindNFTRule, Backend: "nftables", Detail: "nftables rule inet cni_plugins_masquerade masq_checks handle 4"}, "rule", "nftables"},
		{"a host-local reservation", footprint.Item{Kind: footprint.KindReservation, Backend: "files", Detail: "/var/lib/cni/networks/nomad/198.18.0.2"}, "reservation", "files"},
		{"a cached result", footprint.Item{Kind: footprint.KindCachedResult, Backend: "files", Detail: "/var/lib/cni/results/nomad-a-eth0"}, "cached_result", "files"},
		{"an attachment GC detached with DEL", footprint.Item{Kind: footprint.Kind(GCCachedAttachment), Detail: "eth0"}, "cached_attachment", "cni"},
		{"the bandwidth plugin's device", footprint.Item{Kind: footprint.KindLink, Backend: "links", Detail: "device bwp0123"}, "network_device", "links"},
		{"a kind not known yet keeps its name, without spaces; no backend is other", footprint.Item{Kind: "ifb device", Detail: "link bwp0123"}, "ifb_device", "other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := itemKind(tc.item); got != tc.wantKind {
				t.Errorf("kind %q, want %q", got, tc.wantKind)
			}
			if got := itemBackend(tc.item); got != tc.wantBackend {
				t.Errorf("backend %q, want %q", got, tc.wantBackend)
			}
		})
	}
}

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
	att := attachment{conf: network{info: networkInfo{name: "nomad"}}, ifName: "eth0"}
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
		t.cleaned(dctx, clean, att.name(), nil, nil)
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
	tel.cleaned(nctx, span, "nomad", []footprint.Item{{Kind: footprint.KindRule, Detail: "iptables x"}}, nil)
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
