package cninet

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/internal/fakecni"
	"github.com/seed1280861d/cninet/internal/fakeipt"
)

func TestGCNeverCollectsAnAllocationBeingSetUp(t *testing.T) {
	o := owner{network: "cninet-unit", id: "busy"}
	ipt := fakeipt.New().Load("nat", fmt.Sprintf("-N %s\n-A POSTROUTING -s 198.18.0.2/32 %s\n",
		o.masqChain(), fakeipt.Format([]string{"-m", "comment", "--comment", o.masqComment(), "-j", o.masqChain()})))
	entered, release := make(chan struct{}), make(chan struct{})
	fake := &fakecni.CNI{SetupHook: func(ctx context.Context, id string) error {
		close(entered)
		<-release
		return nil
	}}
	conf := []byte(`{"cniVersion":"1.0.0","name":"cninet-unit","plugins":[{"type":"bridge"}]}`)
	c, err := New(Config{ConfList: conf, CNI: fake, IPTables: func(bool) (IPTables, error) { return ipt, nil }})
	if err != nil {
		t.Fatal(err)
	}
	c.cacheDir = t.TempDir()
	setupDone := make(chan error, 1)
	go func() {
		_, err := c.Setup(context.Background(), &Allocation{ID: "busy"}, "/var/run/netns/busy")
		setupDone <- err
	}()
	<-entered
	gcDone := make(chan error, 1)
	go func() {
		_, err := c.GC(context.Background(), []string{})
		gcDone <- err
	}()
	for !gcActive(c) {
		time.Sleep(time.Millisecond)
	}
	close(release)
	if err := <-setupDone; err != nil {
		t.Fatal(err)
	}
	if err := <-gcDone; err != nil {
		t.Fatal(err)
	}
	if !ipt.HasChain("nat", o.masqChain()) || len(ipt.Rules("nat", "POSTROUTING")) != 1 {
		t.Fatal("GC collected an allocation that was being set up when it started")
	}
	if _, err := c.GC(context.Background(), []string{}); err != nil {
		t.Fatal(err)
	}
	if ipt.HasChain("nat", o.masqChain()) {
		t.Fatal("a later GC, with the allocation idle and not live, left it")
	}
}

func gcActive(c *Configurator) bool {
	c.gc.mu.Lock()
	defer c.gc.mu.Unlock()
	return c.gc.active > 0
}
