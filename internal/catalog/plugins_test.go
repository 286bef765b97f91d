package catalog

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/internal/errs"
)

func TestPluginLookupIsKeptUntilAPluginDirectoryChanges(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"loopback", "bridge", "firewall", "portmap"} {
		if err := os.WriteFile(filepath.Join(dir, p), nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := BridgeConfList(Bridge{IPv4Subnet: "198.18.0.0/24", IPAMDataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	conf, err := Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	p := NewPlugins([]string{dir}, nil, nil, nil)
	if err := p.Check(conf); err != nil {
		t.Fatalf("all plugins present: %v", err)
	}
	if p.found[conf.Info.Name].list != conf.List {
		t.Fatal("a successful lookup was not kept")
	}
	if err := os.Remove(filepath.Join(dir, "portmap")); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour) // a coarse clock could leave the mtime as it was
	if err := os.Chtimes(dir, past, past); err != nil {
		t.Fatal(err)
	}
	if err := p.Check(conf); !errors.Is(err, errs.PluginMissing) {
		t.Fatalf("portmap removed: err = %v, want errs.PluginMissing", err)
	}
}
