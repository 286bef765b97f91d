package catalog

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/cninettest/fakes"
)

// A network a Reload dropped is still found for a Teardown, by an
// operation that looked at the networks before, during or after any
// number of Reloads that drop it and bring it back (run with -race: the
// retired networks are never changed under a reader).
func TestARetiredNetworkIsFoundWhileReloadsDropAndBringItBack(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, i int) {
		raw, err := BridgeConfList(Bridge{NetworkName: name, BridgeName: "br-" + name,
			IPv4Subnet: fmt.Sprintf("198.18.%d.0/24", i), IPAMDataDir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := WriteConfList(dir, raw); err != nil {
			t.Fatal(err)
		}
	}
	write("a", 0)
	write("b", 1)
	n, err := NewNetworks(Sources{ConfDir: dir, NetworkName: "a"}, hclog.NewNullLogger(), &fakes.CNI{})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // drops b, brings it back, drops it again
		defer wg.Done()
		for i := 0; i < 51; i++ {
			if i%2 == 0 {
				if err := os.Remove(filepath.Join(dir, "b.conflist")); err != nil {
					t.Error(err)
					return
				}
			} else {
				write("b", 1)
			}
			if err := n.Reload(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for i := 0; i < 200; i++ {
		if _, ok := n.View().Lookup("b", true); !ok {
			t.Fatalf("lookup %d: network b, dropped or back, not found for a Teardown", i)
		}
	}
	wg.Wait()
	if _, ok := n.View().Lookup("b", false); ok {
		t.Fatal("network b, dropped by the last Reload, found for an operation other than Teardown")
	}
}
