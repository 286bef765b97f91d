package cninet

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A runner restarts after network b's conflist was removed: its Teardown
// still detaches b, with the conflist the record kept from b's ADD.
func TestTeardownOfANetworkWhoseConflistWentRunsTheRecordedConflist(t *testing.T) {
	f := newMultiFixture(t, quickRetry)
	alloc := &Allocation{ID: "w", NetworkNames: []string{"a", "b"}}
	if _, err := f.c.Setup(context.Background(), alloc, "/x"); err != nil {
		t.Fatal(err)
	}
	matches, err := filepath.Glob(filepath.Join(f.dir, "b.conflist"))
	if err != nil || len(matches) != 1 {
		t.Fatalf("b's conflist: %v %v", matches, err)
	}
	if err := os.Remove(matches[0]); err != nil {
		t.Fatal(err)
	}
	restarted := f.configurator(t)
	if _, err := restarted.nets.Known("b", true); !errors.Is(err, ErrNetworkNotFound) {
		t.Fatalf("the restarted runner knows b: %v", err)
	}
	if err := restarted.Teardown(context.Background(), alloc, "/x"); err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	if got := f.drv.byNetwork()["b"]; !strings.HasSuffix(got, "DEL eth1") {
		t.Fatalf("b's calls %q, want its DEL last", got)
	}
	if recs, err := restarted.Attachments(); err != nil || len(recs) != 0 {
		t.Fatalf("records left: %+v %v", recs, err)
	}
}
