package cninet

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/internal/fakecni"
)

func TestPluginLookupIsKeptUntilAPluginDirectoryChanges(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"loopback", "bridge", "firewall", "portmap"} {
		if err := os.WriteFile(filepath.Join(dir, p), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	conf, err := BridgeConfList(BridgeConfig{IPv4Subnet: "198.18.0.0/24", IPAMDataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(Config{ConfList: conf, CNI: &fakecni.CNI{}, PluginDirs: []string{dir}, CacheDir: t.TempDir(), StateDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	c.findPlugins = true // as with the default go-cni, which finds nothing itself
	if err := c.checkPlugins(c.conf); err != nil {
		t.Fatalf("all plugins present: %v", err)
	}
	if c.pluginsOK.list != c.conf.list {
		t.Fatal("a successful lookup was not kept")
	}
	if err := os.Remove(filepath.Join(dir, "portmap")); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour) // a coarse clock could leave the mtime as it was
	if err := os.Chtimes(dir, past, past); err != nil {
		t.Fatal(err)
	}
	if err := c.checkPlugins(c.conf); !errors.Is(err, ErrPluginMissing) {
		t.Fatalf("portmap removed: err = %v, want ErrPluginMissing", err)
	}
}
