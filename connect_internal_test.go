package cninet

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// cached lists the attachments in libcni's cache as network/id/ifName.
func (f multiFixture) cached(t *testing.T) []string {
	t.Helper()
	as, err := f.c.lib.GetCachedAttachments("")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, a := range as {
		out = append(out, a.Network+"/"+a.ContainerID+"/"+a.IfName)
	}
	sort.Strings(out)
	return out
}

func TestConnectAttachesOneMoreNetworkUnderTheLowestFreeInterfaceName(t *testing.T) {
	f := newMultiFixture(t, quickRetry)
	alloc := &Allocation{ID: "w", Ports: []Port{{Value: 8080, To: 80}}, Args: map[string]string{"K": "v"}, NetworkNames: []string{"a", "b"}}
	if _, err := f.c.Setup(context.Background(), alloc, "/x"); err != nil {
		t.Fatal(err)
	}
	st, err := f.c.Connect(context.Background(), alloc, "c", "/x")
	if err != nil {
		t.Fatal(err)
	}
	if st.IfName != "eth2" || len(st.Interfaces) != 1 || st.Interfaces[0].Network != "c" || !st.Address.IsValid() {
		t.Fatalf("status %+v, want network c alone, on eth2, with an address", st)
	}
	add := f.drv.find("ADD", "c")
	if add.ifName != "eth2" || !reflect.DeepEqual(add.args, f.drv.find("ADD", "b").args) || !reflect.DeepEqual(add.mappings, f.drv.find("ADD", "b").mappings) {
		t.Fatalf("connect ADD %+v: want eth2 with the allocation's args and port mappings", add)
	}
	if err := f.c.Disconnect(context.Background(), alloc, "b", "/x"); err != nil {
		t.Fatal(err)
	}
	alloc.NetworkNames = []string{"a"} // the runner dropped b
	third := &Allocation{ID: "w", NetworkNames: alloc.NetworkNames}
	if err := os.WriteFile(filepath.Join(f.dir, "d.conflist"), []byte(`{"cniVersion":"1.0.0","name":"d","plugins":[{"type":"ptp"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Reload(); err != nil {
		t.Fatal(err)
	}
	if st, err := f.c.Connect(context.Background(), third, "d", "/x"); err != nil || st.IfName != "eth1" {
		t.Fatalf("connect after a disconnect: %+v, %v; want eth1, the name b freed", st, err)
	}
	if got, want := f.cached(t), []string{"c/w/eth2", "d/w/eth1"}; !reflect.DeepEqual(got, want) {
		t.Fatalf("cached attachments %v, want %v", got, want)
	}
}

func TestConnectRefusesWhatItCannotDoBeforeAnyPluginRuns(t *testing.T) {
	cases := []struct {
		name, network string
		want          error
		inErr         string
	}{
		{"a network the allocation names", "b", ErrAlreadyAttached, `network "b" as eth1`},
		{"a network connected before", "c", ErrAlreadyAttached, `network "c" as eth2`},
		{"a network the configurator does not know", "nope", ErrNetworkNotFound, "known: a, b, c"},
		{"a name no network can have", "a b", ErrInvalidArgument, `"a b"`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newMultiFixture(t, quickRetry)
			alloc := &Allocation{ID: "w", NetworkNames: []string{"a", "b"}}
			if _, err := f.c.Setup(context.Background(), alloc, "/x"); err != nil {
				t.Fatal(err)
			}
			if _, err := f.c.Connect(context.Background(), alloc, "c", "/x"); err != nil {
				t.Fatal(err)
			}
			before := f.drv.log()
			_, err := f.c.Connect(context.Background(), alloc, tc.network, "/x")
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.inErr) {
				t.Fatalf("err = %v, want %v saying %s", err, tc.want, tc.inErr)
			}
			if f.drv.log() != before {
				t.Fatalf("plugins ran: %q after %q", f.drv.log(), before)
			}
		})
	}
}

func TestAConnectThatFailsLeavesNothingOfTheNewNetworkAndTheOthersUntouched(t *testing.T) {
	f := newMultiFixture(t, quickRetry)
	errBroken := errors.New("ptp: no such device")
	alloc := &Allocation{ID: "w", NetworkNames: []string{"a", "b"}}
	if _, err := f.c.Setup(context.Background(), alloc, "/x"); err != nil {
		t.Fatal(err)
	}
	f.drv.addErrs["c"] = []error{errBroken, errBroken}
	f.leakMasquerade("c", "w", "198.18.2.7")
	_, err := f.c.Connect(context.Background(), alloc, "c", "/x")
	if !errors.Is(err, ErrSetupFailed) || !errors.Is(err, errBroken) || !strings.Contains(err.Error(), `network "c"`) {
		t.Fatalf("err = %v, want ErrSetupFailed naming network c", err)
	}
	if got := f.drv.byNetwork(); got["b"] != "ADD eth1" || got["c"] != "ADD eth2, DEL eth2, ADD eth2, DEL eth2" {
		t.Fatalf("driver calls %v: want c retried and detached, b untouched", got)
	}
	if f.hasMasquerade("c", "w") || !reflect.DeepEqual(f.cached(t), []string{"b/w/eth1"}) {
		t.Fatalf("after the failed connect: masquerade of c %v, cache %v; want none of c, b's kept", f.hasMasquerade("c", "w"), f.cached(t))
	}
}

func TestDisconnectDetachesOneNetworkAndIsIdempotent(t *testing.T) {
	cases := []struct {
		name, network string
		want          error
		calls         map[string]string
	}{
		{"a network the allocation names", "b", nil, map[string]string{"b": "ADD eth1, DEL eth1", "c": "ADD eth2"}},
		{"a connected network", "c", nil, map[string]string{"b": "ADD eth1", "c": "ADD eth2, DEL eth2"}},
		{"a network disconnected before, though the allocation still names it: nil, nothing runs", "again", nil, map[string]string{"b": "ADD eth1", "c": "ADD eth2"}},
		{"a known network it never joined: nil, nothing runs", "never", nil, map[string]string{"b": "ADD eth1", "c": "ADD eth2"}},
		{"a network the configurator does not know", "nope", ErrNetworkNotFound, map[string]string{"b": "ADD eth1", "c": "ADD eth2"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newMultiFixture(t, quickRetry)
			alloc := &Allocation{ID: "w", NetworkNames: []string{"a", "b"}}
			if _, err := f.c.Setup(context.Background(), alloc, "/x"); err != nil {
				t.Fatal(err)
			}
			if _, err := f.c.Connect(context.Background(), alloc, "c", "/x"); err != nil {
				t.Fatal(err)
			}
			network := tc.network
			switch network {
			case "again":
				if err := f.c.Disconnect(context.Background(), alloc, "b", "/x"); err != nil {
					t.Fatal(err)
				}
				f.drv.mu.Lock()
				f.drv.calls = f.drv.calls[:len(f.drv.calls)-1] // forget that DEL: the second one is under test
				f.drv.mu.Unlock()
				network = "b"
			case "never":
				if err := os.WriteFile(filepath.Join(f.dir, "d.conflist"), []byte(`{"cniVersion":"1.0.0","name":"d","plugins":[{"type":"ptp"}]}`), 0o644); err != nil {
					t.Fatal(err)
				}
				if err := f.c.Reload(); err != nil {
					t.Fatal(err)
				}
				network = "d"
			}
			err := f.c.Disconnect(context.Background(), alloc, network, "")
			if !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			if got := f.drv.byNetwork(); !reflect.DeepEqual(got, tc.calls) {
				t.Fatalf("driver calls %v, want %v", got, tc.calls)
			}
			if strings.Contains(f.cniVerbs(), "Remove") {
				t.Fatal("network a was detached")
			}
		})
	}
}

func TestConnectAndDisconnectAreTracedWithTheirNetworksDetach(t *testing.T) {
	f := newMultiFixture(t, quickRetry)
	rec := tracetest.NewSpanRecorder()
	f.c.tel = newTelemetry(Config{TracerProvider: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))}, f.c.logger, f.c.nets)
	f.c.wire()
	alloc := &Allocation{ID: "w", NetworkNames: []string{"a"}}
	if _, err := f.c.Setup(context.Background(), alloc, "/x"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.Connect(context.Background(), alloc, "c", "/x"); err != nil {
		t.Fatal(err)
	}
	if err := f.c.Disconnect(context.Background(), alloc, "c", "/x"); err != nil {
		t.Fatal(err)
	}
	parents := map[string]string{}
	byID := map[trace.SpanID]string{}
	for _, s := range rec.Ended() {
		byID[s.SpanContext().SpanID()] = s.Name()
	}
	for _, s := range rec.Ended() {
		if s.Name() == "cninet.attach" || s.Name() == "cninet.detach" {
			parents[s.Name()+" under "+byID[s.Parent().SpanID()]] = s.Name()
		}
	}
	for _, want := range []string{"cninet.attach under cninet.Connect", "cninet.detach under cninet.Disconnect"} {
		if _, ok := parents[want]; !ok {
			t.Errorf("no %s; spans: %v", want, parents)
		}
	}
}

func TestCheckIfName(t *testing.T) {
	cases := []struct {
		name, ifName string
		ok           bool
	}{
		{"eth0 is valid", "eth0", true},
		{"15 bytes are valid", "abcdefghijklmno", true},
		{"empty is refused", "", false},
		{"16 bytes are refused", "abcdefghijklmnop", false},
		{"a slash is refused", "eth/0", false},
		{"a colon is refused", "eth0:1", false},
		{"a space is refused", "eth 0", false},
		{"dot-dot is refused", "..", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := CheckIfName(tc.ifName); tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalidArgument)) {
				t.Fatalf("got %v, want ok=%v", err, tc.ok)
			}
		})
	}
}

func TestConnectOptionsRuntimeIDIsWhatTheRecordsNameAsTheRuntimesID(t *testing.T) {
	cases := []struct {
		name, id, runtimeID, want string
	}{
		{"a delegate id's record names the runtime's id", "w.net1", "w", "w"},
		{"the allocation's own id names no other", "w", "w", ""},
		{"none given names none", "w", "", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newMultiFixture(t, quickRetry)
			ns := newLiveNamespace(t)
			alloc := &Allocation{ID: tc.id}
			if _, err := f.c.Connect(context.Background(), alloc, "b", ns.path, ConnectOptions{IfName: "net1", RuntimeID: tc.runtimeID}); err != nil {
				t.Fatal(err)
			}
			recs, err := f.c.Attachments(tc.id)
			if err != nil || len(recs) != 1 || recs[0].RuntimeID != tc.want {
				t.Fatalf("records %+v, %v; want one whose RuntimeID is %q", recs, err, tc.want)
			}
			if err := f.c.Disconnect(context.Background(), alloc, "b", ns.path, ConnectOptions{IfName: "net1", RuntimeID: tc.runtimeID}); err != nil {
				t.Fatal(err)
			}
			if recs, err := f.c.Attachments(tc.id); err != nil || len(recs) != 0 {
				t.Fatalf("records after Disconnect %+v, %v; want none", recs, err)
			}
		})
	}
}

func TestConnectOptionsRuntimeIDIsRefusedBeforeAnyPluginRunsWhenNoRecordCouldNameIt(t *testing.T) {
	cases := []struct {
		name  string
		opts  ConnectOptions
		inErr string
	}{
		{"without the interface the runtime named", ConnectOptions{RuntimeID: "w"}, "without IfName"},
		{"not a container id", ConnectOptions{IfName: "net1", RuntimeID: "w x"}, "want a CNI container ID"},
		{"starting with a dot", ConnectOptions{IfName: "net1", RuntimeID: ".w"}, "want a CNI container ID"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newMultiFixture(t, quickRetry)
			alloc := &Allocation{ID: "w.net1"}
			_, connectErr := f.c.Connect(context.Background(), alloc, "b", "/x", tc.opts)
			disconnectErr := f.c.Disconnect(context.Background(), alloc, "b", "/x", tc.opts)
			for op, err := range map[string]error{"Connect": connectErr, "Disconnect": disconnectErr} {
				if !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), tc.inErr) || !strings.Contains(err.Error(), op) {
					t.Errorf("%s: err = %v, want ErrInvalidArgument naming %s and saying %s", op, err, op, tc.inErr)
				}
			}
			if log := f.drv.log(); log != "" {
				t.Fatalf("plugins ran: %q", log)
			}
		})
	}
}
