package cninet

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
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

// Setup and Teardown each time, before their first plugin runs, the wait
// for the allocation's locks and the finding of its networks or
// attachments, in one debug line the bench reads: with the per-network
// lines every phase of the operation is timed.
func TestSetupAndTeardownLogTheirLockWaitAndFindingBeforeAnyPlugin(t *testing.T) {
	f := newMultiFixture(t, quickRetry)
	var log strings.Builder
	f.c.logger = hclog.New(&hclog.LoggerOptions{Output: &log, Level: hclog.Debug})
	f.c.wire()
	alloc := &Allocation{ID: "w", NetworkNames: []string{"a", "b"}}
	if _, err := f.c.Setup(context.Background(), alloc, "/x"); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Teardown(context.Background(), alloc, "/x"); err != nil {
		t.Fatal(err)
	}
	ops := foundAndPlugins(t, log.String())
	want := []string{"setup 2", "plugins", "plugins", "teardown 2", "plugins", "plugins"}
	if !slices.Equal(ops, want) {
		t.Errorf("log order %v, want %v:\n%s", ops, want, log.String())
	}
}

// Connect and Disconnect of a named interface (a runtime's ADD and DEL,
// as thick mode makes them) log the same line before their plugins run.
func TestConnectAndDisconnectAsLogTheirLockWaitAndFindingBeforeAnyPlugin(t *testing.T) {
	f := newMultiFixture(t, quickRetry)
	var log strings.Builder
	f.c.logger = hclog.New(&hclog.LoggerOptions{Output: &log, Level: hclog.Debug})
	f.c.wire()
	alloc := &Allocation{ID: "w"}
	if _, err := f.c.Connect(context.Background(), alloc, "a", "/x", ConnectOptions{IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Disconnect(context.Background(), alloc, "a", "/x", ConnectOptions{IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	ops := foundAndPlugins(t, log.String())
	if want := []string{"connect 1", "plugins", "disconnect 1", "plugins"}; !slices.Equal(ops, want) {
		t.Errorf("log order %v, want %v:\n%s", ops, want, log.String())
	}
}

// foundAndPlugins reads allocation w's debug log in order: "OP N" for
// each "attachments found" line (its lock and find durations checked),
// "plugins" for each network attached or detached.
func foundAndPlugins(t *testing.T, log string) []string {
	t.Helper()
	found := regexp.MustCompile(`attachments found: alloc_id=w operation=(\w+) networks=(\d+) lock="?([^"\s]+)"? find="?([^"\s]+)`)
	var ops []string
	for _, line := range strings.Split(log, "\n") {
		switch m := found.FindStringSubmatch(line); {
		case m != nil:
			for _, d := range m[3:] {
				if _, err := time.ParseDuration(d); err != nil {
					t.Errorf("line %q: %q is no duration", line, d)
				}
			}
			ops = append(ops, m[1]+" "+m[2])
		case strings.Contains(line, "network attached"), strings.Contains(line, "network detached"):
			ops = append(ops, "plugins")
		}
	}
	return ops
}
