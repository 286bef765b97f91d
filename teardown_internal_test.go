package cninet

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/internal/footprint"
)

func TestTeardownDetachesEveryNetworkLastFirstAndReportsEachFailure(t *testing.T) {
	errList := errors.New("iptables: cannot list")
	f := newMultiFixture(t, quickRetry)
	alloc := &Allocation{ID: "w", Ports: []Port{{Value: 8080, To: 80}}, Args: map[string]string{"K": "v"}, NetworkNames: []string{"a", "b", "c"}}
	if _, err := f.c.Setup(context.Background(), alloc, "/x"); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"b", "c"} {
		f.v4.FailList["nat/"+footprint.Attachment{Network: n, ID: "w"}.MasqChain()] = errList
	}
	err := f.c.Teardown(context.Background(), alloc, "/x")
	if got, want := f.drv.byNetwork(), map[string]string{"b": "ADD eth1, DEL eth1", "c": "ADD eth2, DEL eth2"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("driver calls %v, want %v", got, want)
	}
	if f.cniVerbs() != "Setup Remove" {
		t.Fatalf("go-cni calls %q: network a was not detached after the others failed", f.cniVerbs())
	}
	var joined interface{ Unwrap() []error }
	if !errors.As(err, &joined) || len(joined.Unwrap()) != 2 {
		t.Fatalf("err = %v, want one error per failed network", err)
	}
	for i, n := range []string{"c", "b"} {
		e := joined.Unwrap()[i]
		if !errors.Is(e, ErrCleanupFailed) || !errors.Is(e, errList) || !strings.Contains(e.Error(), fmt.Sprintf("network %q", n)) {
			t.Errorf("error %d = %v, want ErrCleanupFailed in network %q wrapping the cause", i, e, n)
		}
	}
	add, del := f.drv.find("ADD", "b"), f.drv.find("DEL", "b")
	if !reflect.DeepEqual(add.mappings, del.mappings) || !reflect.DeepEqual(add.args, del.args) || len(add.mappings) != 2 || len(add.args) != 2 {
		t.Fatalf("ADD sent %v %v, DEL %v %v: want the same port mappings and args", add.mappings, add.args, del.mappings, del.args)
	}
}
