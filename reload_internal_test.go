package cninet

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestReloadAddsNetworksAndTeardownStillDetachesADroppedOne(t *testing.T) {
	f := newMultiFixture(t, quickRetry)
	alloc := &Allocation{ID: "w", NetworkNames: []string{"a", "c"}}
	if _, err := f.c.Setup(context.Background(), alloc, "/x"); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(f.dir, "c.conflist")); err != nil {
		t.Fatal(err)
	}
	d, err := BridgeConfList(BridgeConfig{NetworkName: "d", BridgeName: "br-d", IPv4Subnet: "198.18.3.0/24", IPAMDataDir: f.ipamDir})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := WriteConfList(f.dir, d); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Reload(); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(f.c.Networks(), " "); got != "a b d" {
		t.Fatalf("after Reload: %q", got)
	}
	if _, err := f.c.Setup(context.Background(), &Allocation{ID: "v", NetworkNames: []string{"c"}}, "/y"); !errors.Is(err, ErrNetworkNotFound) {
		t.Fatalf("joining the dropped network: %v, want ErrNetworkNotFound", err)
	}
	if _, err := f.c.Setup(context.Background(), &Allocation{ID: "v", NetworkNames: []string{"d"}}, "/y"); err != nil {
		t.Fatalf("joining the new network: %v", err)
	}
	if err := f.c.Teardown(context.Background(), alloc, "/x"); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(f.drv.log(), "DEL c/eth1") {
		t.Fatalf("driver calls %q: the dropped network was not detached", f.drv.log())
	}
}

// Teardown reads the known networks while a Reload (Config.Watch runs
// one whenever ConfDir changes) replaces them: under the race detector,
// every read must hold the networks' lock.
func TestTeardownWhileReloadingReadsTheKnownNetworksUnderTheirLock(t *testing.T) {
	f := newMultiFixture(t, quickRetry)
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := f.c.Reload(); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	defer func() { close(stop); <-done }()
	for i := range 50 {
		alloc := &Allocation{ID: fmt.Sprintf("w%d", i), NetworkNames: []string{"a", "b"}}
		if err := f.c.Teardown(context.Background(), alloc, "/x"); err != nil {
			t.Fatalf("teardown of what was never set up: %v", err)
		}
	}
}
