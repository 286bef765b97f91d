package cninet_test

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/cninettest"
	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
	footprintpkg "github.com/seed1280861d/cninet/internal/footprint"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

const telNetNS = "/var/run/netns/tel"

var quickRetries = cninet.RetryPolicy{Attempts: 3, BaseDelay: time.Millisecond, MaxDelay: 2 * time.Millisecond}

func TestTelemetryOfASuccessfulSetupAndTeardown(t *testing.T) {
	f := newTelFixture(t, &fakes.CNI{}, quickRetries)
	alloc := &cninet.Allocation{ID: "alloc-1"}
	if _, err := f.c.Setup(context.Background(), alloc, telNetNS); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Teardown(context.Background(), alloc, telNetNS); err != nil {
		t.Fatal(err)
	}
	r := f.rig
	setup, attach, add := r.one(t, "cninet.Setup"), r.one(t, "cninet.attach"), r.one(t, "cninet.add")
	teardown, detach := r.one(t, "cninet.Teardown"), r.one(t, "cninet.detach")
	del, cleanup := r.one(t, "cninet.del"), r.one(t, "cninet.cleanup")
	childOf(t, attach, setup)
	childOf(t, add, attach)
	childOf(t, detach, teardown)
	childOf(t, del, detach)
	childOf(t, cleanup, detach)
	wantAttrs(t, setup, map[string]string{"cni.id": "alloc-1", "cni.path": telNetNS, "cninet.operation": "setup"})
	wantAttrs(t, attach, map[string]string{"cni.id": "alloc-1", "cni.name": "nomad", "cni.ifname": "eth0"})
	wantAttrs(t, add, map[string]string{"cni.name": "nomad", "cninet.attempt": "1", "cninet.backoff": ""})
	wantAttrs(t, teardown, map[string]string{"cni.id": "alloc-1", "cninet.operation": "teardown"})
	wantAttrs(t, cleanup, map[string]string{"cninet.removed": "0"})
	for _, s := range r.spans.Ended() {
		if s.Status().Code == codes.Error {
			t.Errorf("span %q has status Error: %s", s.Name(), s.Status().Description)
		}
	}
	for _, tc := range []struct {
		metric string
		attrs  map[string]string
		want   int64
	}{
		{"cninet.operations", map[string]string{"cninet.operation": "setup"}, 1},
		{"cninet.operations", map[string]string{"cninet.operation": "teardown"}, 1},
		{"cninet.operations", map[string]string{"error.type": "_OTHER"}, 0},
		{"cninet.network.operations", map[string]string{"cninet.operation": "attach", "cni.name": "nomad"}, 1},
		{"cninet.network.operations", map[string]string{"cninet.operation": "detach", "cni.name": "nomad"}, 1},
		{"cninet.add.attempts", map[string]string{"cni.name": "nomad"}, 1},
		{"cninet.add.retries", nil, 0},
		{"cninet.cleanup.removed", nil, 0},
		{"cninet.networks", nil, 1},
	} {
		if got := r.sum(t, tc.metric, tc.attrs); got != tc.want {
			t.Errorf("%s%v = %d, want %d", tc.metric, tc.attrs, got, tc.want)
		}
	}
	if n := r.count(t, "cninet.operation.duration", map[string]string{"cninet.operation": "setup"}); n != 1 {
		t.Errorf("setup durations recorded: %d, want 1", n)
	}
	if n := r.count(t, "cninet.network.operation.duration", map[string]string{"cninet.operation": "detach"}); n != 1 {
		t.Errorf("detach durations recorded: %d, want 1", n)
	}
}

func TestTelemetryOfARetriedADD(t *testing.T) {
	f := newTelFixture(t, &fakes.CNI{SetupErrs: []error{errors.New("bridge: device or resource busy")}}, quickRetries)
	if _, err := f.c.Setup(context.Background(), &cninet.Allocation{ID: "alloc-1"}, telNetNS); err != nil {
		t.Fatal(err)
	}
	r := f.rig
	adds := r.named("cninet.add")
	if len(adds) != 2 {
		t.Fatalf("%d ADD attempt spans, want 2: %s", len(adds), r.tree())
	}
	failed, retried := adds[0], adds[1]
	if failed.Status().Code != codes.Error || !strings.Contains(failed.Status().Description, "device or resource busy") {
		t.Errorf("first attempt's status %+v, want Error with the plugin's message", failed.Status())
	}
	if !slices.ContainsFunc(failed.Events(), func(e sdktrace.Event) bool { return e.Name == "exception" }) {
		t.Error("first attempt's error is not recorded as an event")
	}
	wantAttrs(t, failed, map[string]string{"cninet.attempt": "1", "error.type": "_OTHER"})
	wantAttrs(t, retried, map[string]string{"cninet.attempt": "2"})
	if attr(retried, "cninet.backoff") == "" || attr(retried, "cninet.backoff") == "0" {
		t.Errorf("second attempt's backoff %q, want the time waited", attr(retried, "cninet.backoff"))
	}
	attach := r.one(t, "cninet.attach")
	childOf(t, r.one(t, "cninet.detach"), attach) // the DEL between the attempts
	if attach.Status().Code == codes.Error {
		t.Error("the network's attach span is an error though the retry succeeded")
	}
	for _, tc := range []struct {
		metric string
		attrs  map[string]string
		want   int64
	}{
		{"cninet.add.attempts", map[string]string{"cni.name": "nomad"}, 2},
		{"cninet.add.attempts", map[string]string{"error.type": "_OTHER"}, 1},
		{"cninet.add.retries", map[string]string{"cni.name": "nomad"}, 1},
		{"cninet.operations", map[string]string{"cninet.operation": "setup"}, 1},
		{"cninet.network.operations", map[string]string{"cninet.operation": "detach"}, 1},
	} {
		if got := r.sum(t, tc.metric, tc.attrs); got != tc.want {
			t.Errorf("%s%v = %d, want %d", tc.metric, tc.attrs, got, tc.want)
		}
	}
}

func TestTelemetryOfAFailedSetupAndItsRollback(t *testing.T) {
	f := newTelFixture(t, &fakes.CNI{SetupErrs: []error{errors.New("portmap: boom")}}, cninet.RetryPolicy{Attempts: 1})
	// What the failed ADD left behind: the rollback's cleanup removes it.
	f.leak(t, footprint{network: "nomad", id: "alloc-1", ip: "198.18.0.2"})
	_, err := f.c.Setup(context.Background(), &cninet.Allocation{ID: "alloc-1"}, telNetNS)
	if !errors.Is(err, cninet.ErrSetupFailed) {
		t.Fatalf("Setup: %v, want ErrSetupFailed", err)
	}
	r := f.rig
	setup, rollback := r.one(t, "cninet.Setup"), r.one(t, "cninet.rollback")
	childOf(t, rollback, setup)
	childOf(t, r.one(t, "cninet.detach"), rollback)
	for _, s := range []sdktrace.ReadOnlySpan{setup, r.one(t, "cninet.attach"), r.one(t, "cninet.add")} {
		if s.Status().Code != codes.Error {
			t.Errorf("span %q status %v, want Error", s.Name(), s.Status())
		}
	}
	wantAttrs(t, setup, map[string]string{"error.type": "setup_failed"})
	if rollback.Status().Code == codes.Error {
		t.Errorf("the rollback succeeded but its span says %q", rollback.Status().Description)
	}
	for _, tc := range []struct {
		metric string
		attrs  map[string]string
		want   int64
	}{
		{"cninet.operations", map[string]string{"cninet.operation": "setup", "error.type": "setup_failed"}, 1},
		{"cninet.network.operations", map[string]string{"cninet.operation": "attach", "error.type": "setup_failed"}, 1},
		{"cninet.network.operations", map[string]string{"cninet.operation": "detach"}, 1},
		{"cninet.add.retries", nil, 0},
		// 4 rules, 2 chains and the reservation, counted as Setup's.
		{"cninet.cleanup.removed", map[string]string{"cninet.operation": "setup", "cni.name": "nomad"}, 7},
		{"cninet.cleanup.removed", map[string]string{"cninet.operation": "teardown"}, 0},
	} {
		if got := r.sum(t, tc.metric, tc.attrs); got != tc.want {
			t.Errorf("%s%v = %d, want %d", tc.metric, tc.attrs, got, tc.want)
		}
	}
}

func TestTelemetryOfATeardownWhoseCleanupFoundLeftovers(t *testing.T) {
	f := newTelFixture(t, &fakes.CNI{}, quickRetries)
	// The namespace is gone and DEL left everything: both families'
	// rules and chains, both reservations, the nftables masquerade rule.
	f.leak(t, footprint{network: "nomad", id: "alloc-1", ip: "198.18.0.2"})
	f.leak(t, footprint{network: "nomad", id: "alloc-1", ip: "fd00:198:18::2", v6: true})
	f.nft.Add(nftMasquerade("nomad", "alloc-1", "eth0", "198.18.0.2", 7))
	if err := f.c.Teardown(context.Background(), &cninet.Allocation{ID: "alloc-1"}, "/var/run/netns/deleted"); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"files/reservation/teardown=2",
		"ip6tables/chain/teardown=2", "ip6tables/rule/teardown=4",
		"iptables/chain/teardown=2", "iptables/rule/teardown=4",
		"nftables/rule/teardown=1",
	}
	if got := f.rig.points(t, "cninet.cleanup.removed", "cninet.backend", "cninet.kind", "cninet.operation"); !slices.Equal(got, want) {
		t.Errorf("cninet.cleanup.removed by backend/kind/operation:\n got %v\nwant %v", got, want)
	}
	cleanup := f.rig.one(t, "cninet.cleanup")
	wantAttrs(t, cleanup, map[string]string{"cninet.removed": "15"})
	if by := attr(cleanup, "cninet.removed_by"); !strings.Contains(by, "nftables rule: 1") || !strings.Contains(by, "iptables chain: 2") {
		t.Errorf("cleanup span's cninet.removed_by = %s", by)
	}
	if n := len(cleanup.Events()); n != 15 {
		t.Errorf("cleanup span has %d events, want one per removed item (15)", n)
	}
	if len(f.nft.Rules()) != 0 || slices.ContainsFunc(f.reservations(t), func(name string) bool { return name != "lock" }) {
		t.Error("the leftovers the metric counts are still there")
	}
}

func TestTelemetryOfGC(t *testing.T) {
	f := newTelFixture(t, &fakes.CNI{}, quickRetries)
	f.leak(t, footprint{network: "nomad", id: "dead-1", ip: "198.18.0.3"})
	f.leak(t, footprint{network: "nomad", id: "live-1", ip: "198.18.0.4"})
	f.nft.Add(nftMasquerade("nomad", "dead-1", "eth0", "198.18.0.3", 3))
	report, err := f.c.GC(context.Background(), []string{"live-1"})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"files/reservation=1", "iptables/chain=2", "iptables/rule=4", "nftables/rule=1"}
	if got := f.rig.points(t, "cninet.gc.removed", "cninet.backend", "cninet.kind"); !slices.Equal(got, want) {
		t.Errorf("cninet.gc.removed by backend/kind:\n got %v\nwant %v", got, want)
	}
	r := f.rig
	gc, sweep := r.one(t, "cninet.GC"), r.one(t, "cninet.gc.sweep")
	childOf(t, sweep, gc)
	childOf(t, r.one(t, "cninet.gc.cached"), gc)
	wantAttrs(t, gc, map[string]string{"cninet.removed": "8", "cninet.live": "1"})
	wantAttrs(t, sweep, map[string]string{"cni.name": "nomad", "cninet.removed": "8"})
	if len(report.Removed()) != 8 {
		t.Errorf("report lists %d items, the metric 8", len(report.Removed()))
	}
	if got := r.sum(t, "cninet.operations", map[string]string{"cninet.operation": "gc"}); got != 1 {
		t.Errorf("gc operations %d, want 1", got)
	}
}

func TestTelemetryOfStatusReportsEachNetworksReadiness(t *testing.T) {
	for _, tc := range []struct {
		name      string
		plugins   []string
		wantReady int64
		wantError string
	}{
		{"every plugin present: ready", []string{"loopback", "bridge", "firewall", "portmap"}, 1, ""},
		{"a plugin missing: not ready, and the error says why", []string{"loopback", "bridge", "firewall"}, 0, "plugin_missing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newTelFixture(t, &fakes.CNI{}, quickRetries)
			c, err := cninet.New(cninet.Config{ConfList: f.c.ConfList(), CNI: &fakes.CNI{}, CacheDir: t.TempDir(), StateDir: t.TempDir(),
				PluginDirs: []string{versionOnlyPlugins(t, tc.plugins...)}, NFTables: noNFTables,
				TracerProvider: f.rig.tp, MeterProvider: f.rig.mp})
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			err = c.Status(context.Background())
			if (err == nil) != (tc.wantError == "") {
				t.Fatalf("Status: %v", err)
			}
			if got := f.rig.sum(t, "cninet.network.ready", map[string]string{"cni.name": "nomad"}); got != tc.wantReady {
				t.Errorf("cninet.network.ready = %d, want %d", got, tc.wantReady)
			}
			wantAttrs(t, f.rig.one(t, "cninet.Status"), map[string]string{"error.type": tc.wantError})
			childOf(t, f.rig.one(t, "cninet.status"), f.rig.one(t, "cninet.Status"))
		})
	}
}

// nftMasquerade is the bridge plugin's nftables masquerade rule of one
// attachment.
func nftMasquerade(network, id, ifName, addr string, handle int) host.NFTRule {
	return host.NFTRule{Family: "inet", Table: "cni_plugins_masquerade", Chain: "masq_checks", Handle: handle,
		Comment: footprintAttachment(network, id).NFTMasqComment(ifName), Saddr: netip.MustParseAddr(addr)}
}

func footprintAttachment(network, id string) footprintpkg.Attachment {
	return footprintpkg.Attachment{Network: network, ID: id}
}

// globalOtelChild marks the process TestTelemetryGoesToTheGlobalProvidersInstalledAfterNew
// runs its check in.
const globalOtelChild = "CNINET_TEST_GLOBAL_OTEL_CHILD"

// versionOnlyPlugins is a plugin directory whose plugins answer VERSION
// (for Status) and nothing else.
func versionOnlyPlugins(t *testing.T, names ...string) string {
	t.Helper()
	dir := t.TempDir()
	script := "#!/bin/sh\n[ \"$CNI_COMMAND\" = VERSION ] && echo '{\"cniVersion\":\"1.0.0\",\"supportedVersions\":[\"0.4.0\",\"1.0.0\"]}'\nexit 0\n"
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// With no provider in Config, cninet reports to the global ones, also
// when the program installs them after New (as go-cni's spans need).
// OpenTelemetry's globals cannot be reset once installed, so the test
// runs in a process of its own, where none was installed yet: it passes
// with -count above 1 too.
func TestTelemetryGoesToTheGlobalProvidersInstalledAfterNew(t *testing.T) {
	if os.Getenv(globalOtelChild) == "" {
		cmd := exec.Command(os.Args[0], "-test.run=^"+t.Name()+"$", "-test.count=1", "-test.v")
		cmd.Env = append(os.Environ(), globalOtelChild+"=1")
		out, err := cmd.CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--- PASS: "+t.Name()) {
			t.Fatalf("in a process of its own: %v\n%s", err, out)
		}
		return
	}
	c, err := cninet.New(cninet.Config{ConfList: unitConfList(t), CNI: &fakes.CNI{}, CacheDir: t.TempDir(), StateDir: t.TempDir(), NFTables: noNFTables,
		IPTables: func(bool) (host.IPTables, error) { return fakes.NewIPTables(), nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rig := newOtelRig(t)
	otel.SetTracerProvider(rig.tp)
	otel.SetMeterProvider(rig.mp)
	if _, err := c.Setup(context.Background(), &cninet.Allocation{ID: "alloc-1"}, telNetNS); err != nil {
		t.Fatal(err)
	}
	wantAttrs(t, rig.one(t, "cninet.Setup"), map[string]string{"cni.id": "alloc-1"})
	childOf(t, rig.one(t, "cninet.add"), rig.one(t, "cninet.attach"))
	if got := rig.sum(t, "cninet.operations", map[string]string{"cninet.operation": "setup"}); got != 1 {
		t.Errorf("setup operations %d, want 1", got)
	}
}

func TestTelemetryOfARepair(t *testing.T) {
	rig := newOtelRig(t)
	env, err := cninettest.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	env.Config.TracerProvider, env.Config.MeterProvider = rig.tp, rig.mp
	c, err := cninet.New(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	alloc := &cninet.Allocation{ID: "web-1", Ports: []cninet.Port{{Value: 8080, To: 80}}}
	ctx := context.Background()
	if _, err := c.Setup(ctx, alloc, "/var/run/netns/web-1"); err != nil {
		t.Fatal(err)
	}
	for _, fp := range env.CNI.Footprints("web-1") {
		env.Host.IPv4.Unload("filter", fp.Filter()) // its two forward rules
	}
	if err := c.Check(ctx, alloc, "/var/run/netns/web-1", cninet.CheckOptions{Repair: true}); err != nil {
		t.Fatal(err)
	}
	repair := rig.one(t, "cninet.repair")
	childOf(t, repair, rig.one(t, "cninet.Check"))
	wantAttrs(t, repair, map[string]string{"cni.id": "web-1", "cni.name": cninettest.Network, "cninet.missing": "2", "cninet.restored": "2"})
	if got := rig.points(t, "cninet.drift.missing", "cninet.plugin", "cninet.backend"); !slices.Equal(got, []string{"firewall/iptables=2"}) {
		t.Errorf("cninet.drift.missing by plugin/backend: %v, want the firewall's two iptables rules", got)
	}
	if got := rig.points(t, "cninet.repairs", "cninet.outcome"); !slices.Equal(got, []string{"repaired=1"}) {
		t.Errorf("cninet.repairs by outcome: %v, want one repaired", got)
	}
}
