package cninet

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/internal/fakecni"
	"github.com/seed1280861d/cninet/internal/fakeipt"
	"github.com/seed1280861d/cninet/internal/fakenft"
	"github.com/seed1280861d/cninet/internal/footprint"
)

func TestGCNeverCollectsAnAllocationBeingSetUp(t *testing.T) {
	o := footprint.Attachment{Network: "cninet-unit", ID: "busy"}
	ipt := fakeipt.New().Load("nat", fmt.Sprintf("-N %s\n-A POSTROUTING -s 198.18.0.2/32 %s\n",
		o.MasqChain(), fakeipt.Format([]string{"-m", "comment", "--comment", o.MasqComment(), "-j", o.MasqChain()})))
	entered, release := make(chan struct{}), make(chan struct{})
	fake := &fakecni.CNI{SetupHook: func(ctx context.Context, id string) error {
		close(entered)
		<-release
		return nil
	}}
	conf := []byte(`{"cniVersion":"1.0.0","name":"cninet-unit","plugins":[{"type":"bridge"}]}`)
	c, err := New(Config{ConfList: conf, CNI: fake, IPTables: func(bool) (IPTables, error) { return ipt, nil }, CacheDir: t.TempDir(),
		NFTables: func() (NFTables, error) { return &fakenft.NFTables{}, nil }})
	if err != nil {
		t.Fatal(err)
	}
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
	if !ipt.HasChain("nat", o.MasqChain()) || len(ipt.Rules("nat", "POSTROUTING")) != 1 {
		t.Fatal("GC collected an allocation that was being set up when it started")
	}
	if _, err := c.GC(context.Background(), []string{}); err != nil {
		t.Fatal(err)
	}
	if ipt.HasChain("nat", o.MasqChain()) {
		t.Fatal("a later GC, with the allocation idle and not live, left it")
	}
}

func gcActive(c *Configurator) bool {
	return c.adm.GCRunning()
}
