package cninet

import (
	"context"
	"errors"
	"strings"
	"testing"
)

func TestCheckChecksEveryNetworkAndNamesEachFailingOne(t *testing.T) {
	cause := errors.New("interface eth2 not found")
	f := newMultiFixture(t, quickRetry)
	alloc := &Allocation{ID: "w", NetworkNames: []string{"a", "b", "c"}}
	if err := f.c.Check(context.Background(), alloc, "/x"); err != nil {
		t.Fatalf("healthy: %v", err)
	}
	if f.cniVerbs() != "Check" || f.drv.log() != "CHECK b/eth1, CHECK c/eth2" {
		t.Fatalf("go-cni %q, driver %q: want every network checked", f.cniVerbs(), f.drv.log())
	}
	f.drv.checkErrs["c"] = cause
	err := f.c.Check(context.Background(), alloc, "/x")
	if !errors.Is(err, ErrCheckFailed) || !errors.Is(err, cause) || !strings.Contains(err.Error(), `network "c"`) || strings.Contains(err.Error(), `network "b"`) {
		t.Fatalf("err = %v, want ErrCheckFailed naming network c only", err)
	}
}
