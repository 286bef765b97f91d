package cninet_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet"
)

// A namespace path that is no network namespace fails Setup, Connect and
// Check at once, before any plugin runs or any retry waits.
func TestNoNetworkNamespaceIsPermanentAtOnce(t *testing.T) {
	c := newPluginlessConfigurator(t)
	regular := filepath.Join(t.TempDir(), "not-a-netns")
	if err := os.WriteFile(regular, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	paths := []struct{ name, path string }{
		{"a path that does not exist", filepath.Join(t.TempDir(), "gone")},
		{"a regular file", regular},
		{"a namespace of another kind (mount)", "/proc/self/ns/mnt"},
	}
	alloc := &cninet.Allocation{ID: "netns-1"}
	operations := []struct {
		name  string
		class error // what a namespace that is not there means for the operation
		call  func(netns string) error
	}{
		{"Setup", cninet.ErrInvalidArgument, func(p string) error { _, err := c.Setup(context.Background(), alloc, p); return err }},
		{"Connect", cninet.ErrInvalidArgument, func(p string) error { _, err := c.Connect(context.Background(), alloc, "nomad", p); return err }},
		{"Connect with an interface name", cninet.ErrInvalidArgument, func(p string) error {
			_, err := c.Connect(context.Background(), alloc, "nomad", p, cninet.ConnectOptions{IfName: "eth3"})
			return err
		}},
		{"Check", cninet.ErrCheckFailed, func(p string) error { return c.Check(context.Background(), alloc, p) }},
		{"Check of one named attachment", cninet.ErrCheckFailed, func(p string) error {
			return c.Check(context.Background(), alloc, p, cninet.CheckOptions{Network: "nomad", IfName: "eth0"})
		}},
	}
	for _, p := range paths {
		for _, op := range operations {
			t.Run(op.name+" with "+p.name, func(t *testing.T) {
				start := time.Now()
				err := op.call(p.path)
				if !errors.Is(err, cninet.ErrNoNetNS) || !errors.Is(err, op.class) {
					t.Fatalf("got %v, want ErrNoNetNS wrapped in %v", err, op.class)
				}
				if d := time.Since(start); d > 50*time.Millisecond {
					t.Fatalf("took %s: a permanent error must not be retried", d)
				}
			})
		}
	}
	t.Run("a network namespace passes the check (the missing plugins fail next)", func(t *testing.T) {
		_, err := c.Setup(context.Background(), alloc, "/proc/self/ns/net")
		if errors.Is(err, cninet.ErrNoNetNS) || !errors.Is(err, cninet.ErrPluginMissing) {
			t.Fatalf("got %v, want ErrPluginMissing and not ErrNoNetNS", err)
		}
	})
}

func TestGCOfAnUnknownNetworkRunsNothing(t *testing.T) {
	c := newPluginlessConfigurator(t)
	for _, name := range []string{"no-such-network", "../etc"} {
		if _, err := c.GC(context.Background(), []string{}, cninet.GCOptions{Networks: []string{name}}); err == nil ||
			!(errors.Is(err, cninet.ErrNetworkNotFound) || errors.Is(err, cninet.ErrInvalidArgument)) {
			t.Fatalf("GC of network %q: %v, want ErrNetworkNotFound or ErrInvalidArgument", name, err)
		}
	}
}

// An operation's options are one optional value: a second one, or a half
// named attachment, is refused before anything runs.
func TestOperationOptionsAreRefusedWhenAmbiguous(t *testing.T) {
	c := newPluginlessConfigurator(t)
	ctx := context.Background()
	alloc := &cninet.Allocation{ID: "options-1"}
	netns := "/proc/self/ns/net"
	cases := []struct {
		name string
		want error
		call func() error
	}{
		{"Connect with two ConnectOptions", cninet.ErrInvalidArgument, func() error {
			_, err := c.Connect(ctx, alloc, "nomad", netns, cninet.ConnectOptions{IfName: "eth1"}, cninet.ConnectOptions{IfName: "eth2"})
			return err
		}},
		{"Disconnect with two ConnectOptions", cninet.ErrInvalidArgument, func() error {
			return c.Disconnect(ctx, alloc, "nomad", netns, cninet.ConnectOptions{}, cninet.ConnectOptions{})
		}},
		{"Check with two CheckOptions", cninet.ErrInvalidArgument, func() error {
			return c.Check(ctx, alloc, netns, cninet.CheckOptions{}, cninet.CheckOptions{})
		}},
		{"Check naming a network without its interface", cninet.ErrInvalidArgument, func() error {
			return c.Check(ctx, alloc, netns, cninet.CheckOptions{Network: "nomad"})
		}},
		{"Check naming an interface without its network", cninet.ErrInvalidArgument, func() error {
			return c.Check(ctx, alloc, netns, cninet.CheckOptions{IfName: "eth0"})
		}},
		{"GC with two GCOptions", cninet.ErrInvalidArgument, func() error {
			_, err := c.GC(ctx, []string{}, cninet.GCOptions{DryRun: true}, cninet.GCOptions{})
			return err
		}},
		{"Status of a network it does not know", cninet.ErrNetworkNotFound, func() error {
			return c.Status(ctx, "no-such-network")
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.call(); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// Status of the networks named checks those; a network that cannot
// attach workloads is ErrNotReady naming it.
func TestStatusOfNamedNetworks(t *testing.T) {
	c := newPluginlessConfigurator(t)
	err := c.Status(context.Background(), "nomad")
	if !errors.Is(err, cninet.ErrNotReady) || !errors.Is(err, cninet.ErrPluginMissing) || !strings.Contains(err.Error(), `"nomad"`) {
		t.Fatalf("Status(nomad) of a Configurator without plugins: %v, want ErrNotReady and ErrPluginMissing naming network \"nomad\"", err)
	}
}

// newPluginlessConfigurator is a Configurator of the default bridge
// conflist whose plugin directory is empty: nothing it is asked to do can
// run a plugin.
func newPluginlessConfigurator(t *testing.T) *cninet.Configurator {
	t.Helper()
	conf, err := cninet.BridgeConfList(cninet.DefaultBridgeConfig())
	if err != nil {
		t.Fatal(err)
	}
	c, err := cninet.New(cninet.Config{ConfList: conf, PluginDirs: []string{t.TempDir()}, StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
