package cninet_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/cninettest/fakes"
)

func TestCheck(t *testing.T) {
	f := newFixture(t, &fakes.CNI{}, fastRetry)
	netns := filepath.Join(t.TempDir(), "netns-w") // nothing is there: the fake plugins never enter it
	if err := f.c.Check(context.Background(), webAlloc(), netns); err != nil {
		t.Fatalf("healthy: %v", err)
	}
	cause := errors.New("bridge: interface eth0 not found")
	f.cni.CheckErr = cause
	err := f.c.Check(context.Background(), webAlloc(), netns)
	if !errors.Is(err, cninet.ErrCheckFailed) || !errors.Is(err, cause) {
		t.Fatalf("err = %v, want ErrCheckFailed wrapping the cause", err)
	}
	last := f.cni.Calls()[len(f.cni.Calls())-1]
	if last.Verb != "Check" || len(last.PortMappings) != 2 || last.Args["IgnoreUnknown"] != "1" {
		t.Fatalf("Check sent %+v, want Setup's port mappings and args", last)
	}
}
