package cninettest_test

import (
	"context"
	"errors"
	"testing"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/cninettest"
)

func TestEnvConfigReachesNothingOfTheHost(t *testing.T) {
	env, err := cninettest.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	cfg := env.Config
	for seam, set := range map[string]bool{
		"CNI": cfg.CNI != nil, "IPTables": cfg.IPTables != nil, "NFTables": cfg.NFTables != nil, "Links": cfg.Links != nil,
		"CacheDir": cfg.CacheDir != "", "StateDir": cfg.StateDir != "", "PluginDirs": len(cfg.PluginDirs) > 0,
	} {
		if !set {
			t.Errorf("Config.%s is the host's default", seam)
		}
	}
}

func TestTeardownLeavesNothingWhateverTheDEL(t *testing.T) {
	for _, tc := range []struct {
		name string
		leak bool
	}{{"the plugins' DEL cleans up", false}, {"the plugins' DEL leaks everything", true}} {
		t.Run(tc.name, func(t *testing.T) {
			env, err := cninettest.New(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			env.CNI.LeakOnRemove = tc.leak
			c, err := cninet.New(env.Config)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			ctx, alloc := context.Background(), &cninet.Allocation{ID: "a", Ports: []cninet.Port{{Value: 8080, To: 80}}}
			if _, err := c.Setup(ctx, alloc, "/var/run/netns/a"); err != nil {
				t.Fatal(err)
			}
			fps := env.CNI.Footprints("a")
			if len(fps) != 1 || len(env.Host.Leftovers(fps[0])) == 0 {
				t.Fatalf("Setup wrote no rules: %+v", fps)
			}
			if err := c.Teardown(ctx, alloc, "/var/run/netns/a"); err != nil {
				t.Fatal(err)
			}
			if left := env.Host.Leftovers(fps[0]); len(left) > 0 {
				t.Errorf("left behind: %q", left)
			}
			if held, err := env.Reservations(); err != nil || len(held) > 0 {
				t.Errorf("reservations left: %v, %v", held, err)
			}
		})
	}
}

// A readiness probe built on Status can be unit-tested on the Env: ready
// as it comes, not ready when the fake CNI's STATUS fails.
func TestStatusOnTheEnv(t *testing.T) {
	for _, tc := range []struct {
		name      string
		statusErr error
		ready     bool
	}{
		{"ready as it comes", nil, true},
		{"not ready when the CNI STATUS fails", errors.New("bridge: no such device"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, err := cninettest.New(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			env.CNI.StatusErr = tc.statusErr
			c, err := cninet.New(env.Config)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for _, networks := range [][]string{nil, {cninettest.Network}} {
				err := c.Status(context.Background(), networks...)
				if tc.ready && err != nil {
					t.Fatalf("Status(%v) = %v, want nil", networks, err)
				}
				if !tc.ready && !errors.Is(err, cninet.ErrNotReady) {
					t.Fatalf("Status(%v) = %v, want ErrNotReady", networks, err)
				}
			}
		})
	}
}
