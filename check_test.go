package cninet_test

import (
	"context"
	"errors"
	"testing"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/cninettest/fakes"
)

func TestCheck(t *testing.T) {
	f := newFixture(t, &fakes.CNI{}, fastRetry)
	if err := f.c.Check(context.Background(), webAlloc(), "/var/run/netns/w"); err != nil {
		t.Fatalf("healthy: %v", err)
	}
	cause := errors.New("bridge: interface eth0 not found")
	f.cni.CheckErr = cause
	err := f.c.Check(context.Background(), webAlloc(), "/var/run/netns/w")
	if !errors.Is(err, cninet.ErrCheckFailed) || !errors.Is(err, cause) {
		t.Fatalf("err = %v, want ErrCheckFailed wrapping the cause", err)
	}
	last := f.cni.Calls()[len(f.cni.Calls())-1]
	if last.Verb != "Check" || len(last.PortMappings) != 2 || last.Args["IgnoreUnknown"] != "1" {
		t.Fatalf("Check sent %+v, want Setup's port mappings and args", last)
	}
}
