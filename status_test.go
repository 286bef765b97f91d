package cninet_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/cninettest/fakes"
)

func TestStatusNamesMissingPlugins(t *testing.T) {
	conf, _ := cninet.BridgeConfList(cninet.DefaultBridgeConfig())
	c, err := cninet.New(cninet.Config{CacheDir: t.TempDir(), StateDir: t.TempDir(), NFTables: noNFTables, ConfList: conf, CNI: &fakes.CNI{}, PluginDirs: []string{t.TempDir()}})
	if err != nil {
		t.Fatal(err)
	}
	err = c.Status(context.Background())
	if !errors.Is(err, cninet.ErrNotReady) || !errors.Is(err, cninet.ErrPluginMissing) {
		t.Fatalf("err = %v, want ErrNotReady and ErrPluginMissing", err)
	}
	for _, p := range []string{"loopback", "bridge", "firewall", "portmap"} {
		if !strings.Contains(err.Error(), p) {
			t.Errorf("error does not name %s: %v", p, err)
		}
	}
}
