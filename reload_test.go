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
	"github.com/seed1280861d/cninet/cninettest/fakes"
)

func confDirWith(t *testing.T, subnet string) (dir string, conf []byte) {
	t.Helper()
	cfg := cninet.DefaultBridgeConfig()
	cfg.IPv4Subnet = subnet
	conf, err := cninet.BridgeConfList(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dir = t.TempDir()
	if _, err := cninet.WriteConfList(dir, conf); err != nil {
		t.Fatal(err)
	}
	return dir, conf
}

func TestReloadPicksUpANewConflistAndKeepsTheLastGoodOneOnError(t *testing.T) {
	dir, first := confDirWith(t, "198.18.0.0/24")
	c, err := cninet.New(cninet.Config{CacheDir: t.TempDir(), StateDir: t.TempDir(), NFTables: noNFTables, ConfDir: dir, NetworkName: "nomad", CNI: &fakes.CNI{}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if string(c.ConfList()) != string(first) {
		t.Fatal("New did not load the conflist from ConfDir")
	}
	cfg := cninet.DefaultBridgeConfig()
	cfg.IPv4Subnet = "198.18.1.0/24"
	second, _ := cninet.BridgeConfList(cfg)
	if _, err := cninet.WriteConfList(dir, second); err != nil {
		t.Fatal(err)
	}
	if err := c.Reload(); err != nil || string(c.ConfList()) != string(second) {
		t.Fatalf("Reload: %v; conflist updated %v", err, string(c.ConfList()) == string(second))
	}
	if err := os.WriteFile(filepath.Join(dir, "nomad.conflist"), []byte(`{"name":"nomad","plugins":[`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := c.Reload(); !errors.Is(err, cninet.ErrInvalidConfig) {
		t.Fatalf("Reload of a broken file: %v, want ErrInvalidConfig", err)
	}
	if string(c.ConfList()) != string(second) {
		t.Fatal("a broken file replaced the last good conflist")
	}
}

func TestReloadWithoutConfDirIsAnError(t *testing.T) {
	f := newFixture(t, &fakes.CNI{}, fastRetry)
	if err := f.c.Reload(); !errors.Is(err, cninet.ErrInvalidConfig) {
		t.Fatalf("err = %v, want ErrInvalidConfig", err)
	}
}

func TestWatchReloadsWhenTheConfDirChanges(t *testing.T) {
	dir, _ := confDirWith(t, "198.18.0.0/24")
	c, err := cninet.New(cninet.Config{CacheDir: t.TempDir(), StateDir: t.TempDir(), NFTables: noNFTables, ConfDir: dir, NetworkName: "nomad", CNI: &fakes.CNI{}, Watch: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cfg := cninet.DefaultBridgeConfig()
	cfg.IPv4Subnet = "198.18.2.0/24"
	next, _ := cninet.BridgeConfList(cfg)
	if _, err := cninet.WriteConfList(dir, next); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(string(c.ConfList()), "198.18.2.0/24") {
		if time.Now().After(deadline) {
			t.Fatal("the watcher did not reload the changed conflist")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := c.Setup(context.Background(), webAlloc(), "/var/run/netns/w"); !errors.Is(err, cninet.ErrClosed) {
		t.Fatalf("Setup after Close: %v, want ErrClosed", err)
	}
}
