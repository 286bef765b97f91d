package thick

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/identity"
	"github.com/seed1280861d/cninet/internal/registry"
)

func TestDelegateIDOf(t *testing.T) {
	for _, tc := range []struct{ name, id, ifName, want string }{
		{"an interface name a container id can hold follows a dot", "c1", "net1", "c1.net1"},
		{"underscores and hyphens are kept", "c1", "eth_1-a", "c1.eth_1-a"},
		{"a name with a dot is hashed after two dots", "c1", "eth0.100", "c1.." + hashOf("eth0.100")},
		{"a name with characters no id holds is hashed", "c1", "net@1", "c1.." + hashOf("net@1")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := delegateIDOf(tc.id, tc.ifName)
			if got != tc.want {
				t.Fatalf("delegateIDOf(%q, %q) = %q, want %q", tc.id, tc.ifName, got, tc.want)
			}
			if !footprint.IsContainerID(got) {
				t.Fatalf("delegateIDOf(%q, %q) = %q is no CNI container id", tc.id, tc.ifName, got)
			}
		})
	}
	if a, b := delegateIDOf("c1", "a.b"), delegateIDOf("c1", "a@b"); a == b {
		t.Fatalf("two interface names share the delegate id %q", a)
	}
}

func hashOf(ifName string) string {
	id := delegateIDOf("", ifName)
	return strings.TrimPrefix(id, "..")
}

// idsServed lists, comma-separated, every id under which the delegate
// saw command for ifName.
func (d delegate) idsServed(t *testing.T, command, ifName string) string {
	t.Helper()
	var ids []string
	for _, line := range strings.Split(d.calls(t), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == command && f[2] == ifName {
			ids = append(ids, f[1])
		}
	}
	return strings.Join(ids, ",")
}

// mustServe serves a request of container id that must succeed.
func (d delegate) mustServe(t *testing.T, id, command, ifName, config string) {
	t.Helper()
	if _, err := d.serveAs(t, id, command, ifName, "", config); err != nil {
		t.Fatalf("%s of container %s as %s: %v (CNI error %+v)", command, id, ifName, err, ErrorFor(err))
	}
}

// mustBeCached fails unless libcni's cache holds a result of id in
// network as ifName; what names the attachment in the failure.
func (d delegate) mustBeCached(t *testing.T, id, network, ifName, what string) {
	t.Helper()
	if res, err := d.c.CachedResult(id, network, ifName); err != nil || res == nil {
		t.Fatalf("%s: cached result %v, %v; want one", what, res, err)
	}
}

// servedAs returns the id under which the delegate saw command for
// ifName ("" when it did not).
func (d delegate) servedAs(t *testing.T, command, ifName string) string {
	t.Helper()
	for _, line := range strings.Split(d.calls(t), "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == command && f[2] == ifName {
			return f[1]
		}
	}
	return ""
}

// A container may join one network under several interfaces: the first
// keeps the container id, each later one is known to the plugins by its
// delegate id, so that one interface's DEL never reaches the other's
// chains, and each command finds its interface's id again.
func TestServeAttachesOneNetworkUnderSeveralInterfaces(t *testing.T) {
	d := newDelegate(t, resultWithAddress)
	for _, ifName := range []string{"eth0", "net1"} {
		d.mustServe(t, "c1", CmdAdd, ifName, webConf)
	}
	if eth0, net1 := d.servedAs(t, CmdAdd, "eth0"), d.servedAs(t, CmdAdd, "net1"); eth0 != "c1" || net1 != "c1.net1" {
		t.Fatalf("the delegate's ADDs: eth0 as %q, net1 as %q, want c1 and c1.net1 (calls %q)", eth0, net1, d.calls(t))
	}
	d.mustServe(t, "c1", CmdCheck, "net1", webConf)
	d.mustServe(t, "c1", CmdDel, "eth0", webConf)
	if got := d.servedAs(t, CmdDel, "eth0"); got != "c1" {
		t.Fatalf("the delegate's DEL of eth0 ran as %q, want c1", got)
	}
	d.mustBeCached(t, "c1.net1", "web", "net1", "net1's cached result after eth0's DEL")
	d.mustServe(t, "c1", CmdCheck, "net1", webConf)
	// eth0 comes back while net1 holds c1.net1: eth0 gets the container
	// id again, which no interface of the network uses now.
	d.mustServe(t, "c1", CmdAdd, "eth0", webConf)
	for _, ifName := range []string{"net1", "eth0"} {
		d.mustServe(t, "c1", CmdDel, ifName, webConf)
	}
	if got := d.servedAs(t, CmdDel, "net1"); got != "c1.net1" {
		t.Fatalf("the delegate's DEL of net1 ran as %q, want c1.net1", got)
	}
	if recs, err := d.c.Attachments(); err != nil || len(recs) != 0 {
		t.Fatalf("the registry after every DEL: %+v, %v, want empty", recs, err)
	}
}

// A DEL of an interface never added, on a network where the container
// has another interface, runs under the delegate id: the plugins' DEL
// of the container id would reach the interface that is there.
func TestServeDelOfAnUnknownInterfaceNeverRunsAsTheAttachedOnesID(t *testing.T) {
	d := newDelegate(t, resultWithAddress)
	d.mustServe(t, "c1", CmdAdd, "eth0", webConf)
	d.mustServe(t, "c1", CmdDel, "net9", webConf)
	if got := d.servedAs(t, CmdDel, "net9"); got != "c1.net9" {
		t.Fatalf("the delegate's DEL of net9 ran as %q, want c1.net9 (calls %q)", got, d.calls(t))
	}
	d.mustBeCached(t, "c1", "web", "eth0", "eth0's cached result after net9's DEL")
}

// An ADD cut short (killed) leaves a record and no cached result; the
// interface's DEL finds its delegate id in the record even when the
// interface that took the container id is gone since.
func TestServeDelOfAnADDCutShortRunsUnderTheRecordedDelegateID(t *testing.T) {
	d := newDelegate(t, resultWithAddress)
	store, err := registry.Open(d.state)
	if err != nil {
		t.Fatal(err)
	}
	rec := &registry.Record{Owner: Owner, Key: identity.Key{Network: "web", ID: "c1.net1", IfName: "net1"}, RuntimeID: "c1", State: registry.Adding,
		ConfList: []byte(`{"cniVersion":"1.0.0","name":"web","plugins":[{"type":"scripted"}]}`)}
	if err := store.Put(rec); err != nil {
		t.Fatal(err)
	}
	d.mustServe(t, "c1", CmdDel, "net1", webConf)
	if got := d.servedAs(t, CmdDel, "net1"); got != "c1.net1" {
		t.Fatalf("the delegate's DEL of net1 ran as %q, want c1.net1 (calls %q)", got, d.calls(t))
	}
	if recs, err := d.c.Attachments(); err != nil || len(recs) != 0 {
		t.Fatalf("the registry after the DEL: %+v, %v, want empty", recs, err)
	}
}

// A runtime may name a container like another's delegate id ("c1.net1"):
// neither container's commands ever reach the other's attachments, in
// whichever order they attach.
func TestServeAContainerNamedLikeADelegateIDIsAnotherContainer(t *testing.T) {
	t.Run("the delegate id first: the container so named gets a delegate id of its own", func(t *testing.T) {
		d := newDelegate(t, resultWithAddress)
		for _, ifName := range []string{"eth0", "net1"} {
			d.mustServe(t, "c1", CmdAdd, ifName, webConf)
		}
		d.mustServe(t, "c1.net1", CmdAdd, "net1", webConf)
		d.mustServe(t, "c1.net1", CmdDel, "net1", webConf)
		if got := d.idsServed(t, CmdDel, "net1"); got != "c1.net1.net1" {
			t.Fatalf("the delegate's DELs of net1 ran as %q, want c1.net1.net1 alone", got)
		}
		d.mustBeCached(t, "c1.net1", "web", "net1", "c1's net1 (delegate id c1.net1) after the other container's DEL")
	})
	t.Run("the container so named first: the delegate id is refused, and its DEL runs nothing", func(t *testing.T) {
		d := newDelegate(t, resultWithAddress)
		d.mustServe(t, "c1.net1", CmdAdd, "net1", webConf)
		d.mustServe(t, "c1", CmdAdd, "eth0", webConf)
		_, err := d.serve(t, CmdAdd, "net1", "", webConf)
		if cerr := ErrorFor(err); !errors.Is(err, ErrDelegateIDTaken) || cerr.Code != CodeAlreadyAttached || !strings.Contains(cerr.Msg, "c1.net1") {
			t.Fatalf("ADD of c1 as net1: %v, want ErrDelegateIDTaken (code %d) naming c1.net1", err, CodeAlreadyAttached)
		}
		d.mustServe(t, "c1", CmdDel, "net1", webConf)
		if got := d.idsServed(t, CmdDel, "net1"); got != "" {
			t.Fatalf("the delegate ran DELs of net1 as %q, want none", got)
		}
		d.mustBeCached(t, "c1.net1", "web", "net1", "container c1.net1's attachment after c1's DEL of net1")
	})
}

// An attachment that only libcni's cache knows (made before the host
// registry, or whose record is damaged) holds the container id too.
func TestServeAnInterfaceOnlyTheCacheKnowsHoldsTheContainerID(t *testing.T) {
	d := newDelegate(t, resultWithAddress)
	d.mustServe(t, "c1", CmdAdd, "eth0", webConf)
	store, err := registry.Open(d.state)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Remove(identity.Key{Network: "web", ID: "c1", IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	d.mustServe(t, "c1", CmdAdd, "net1", webConf)
	if got := d.servedAs(t, CmdAdd, "net1"); got != "c1.net1" {
		t.Fatalf("the delegate's ADD of net1 ran as %q, want c1.net1", got)
	}
	d.mustServe(t, "c1", CmdDel, "eth0", webConf)
	if got := d.servedAs(t, CmdDel, "eth0"); got != "c1" {
		t.Fatalf("the delegate's DEL of eth0 ran as %q, want c1", got)
	}
}

// withNetworkDB adds network db, of the same plugin, to d's delegates.
func (d delegate) withNetworkDB(t *testing.T) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(d.confs, "db.conflist"), []byte(`{"cniVersion":"1.0.0","name":"db","plugins":[{"type":"scripted"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.c.Reload(); err != nil {
		t.Fatal(err)
	}
}

const dbConf = `{"cniVersion":"1.0.0","name":"db","type":"cninet-shim"}`

// An interface name names an attachment in one network: a DEL of the
// name in another network never runs under the id it has in the first.
func TestServeDelOfAnInterfaceNameAnotherNetworkHolds(t *testing.T) {
	t.Run("the id another container holds in the network is left alone", func(t *testing.T) {
		d := newDelegate(t, resultWithAddress)
		d.withNetworkDB(t)
		for _, ifName := range []string{"eth0", "net1"} { // net1 as c1.net1 in web
			d.mustServe(t, "c1", CmdAdd, ifName, webConf)
		}
		d.mustServe(t, "c1.net1", CmdAdd, "eth0", dbConf)
		d.mustServe(t, "c1", CmdDel, "net1", dbConf)
		if got := d.idsServed(t, CmdDel, "net1"); got != "c1" {
			t.Fatalf("the delegate's DELs of net1 ran as %q, want c1 (free in db) alone", got)
		}
		d.mustBeCached(t, "c1.net1", "db", "eth0", "container c1.net1's db attachment after c1's DEL of db as net1")
	})
	t.Run("the container's own id held by another interface in the network is left alone", func(t *testing.T) {
		d := newDelegate(t, resultWithAddress)
		d.withNetworkDB(t)
		d.mustServe(t, "c1", CmdAdd, "net1", webConf)
		d.mustServe(t, "c1", CmdAdd, "eth0", dbConf)
		_, err := d.serve(t, CmdAdd, "net1", "", dbConf)
		if cerr := ErrorFor(err); cerr == nil || cerr.Code != CodeAlreadyAttached || !strings.Contains(cerr.Msg, `"web"`) {
			t.Fatalf("ADD of db as net1, a name web holds: %v, want code %d naming web", err, CodeAlreadyAttached)
		}
		d.mustServe(t, "c1", CmdDel, "net1", dbConf)
		if got := d.idsServed(t, CmdDel, "net1"); got != "c1.net1" {
			t.Fatalf("the delegate's DELs of net1 ran as %q, want c1.net1 alone", got)
		}
		for _, a := range [][2]string{{"web", "net1"}, {"db", "eth0"}} {
			if res, err := d.c.CachedResult("c1", a[0], a[1]); err != nil || res == nil {
				t.Fatalf("c1's %s attachment as %s after the DEL: %v, %v", a[0], a[1], res, err)
			}
		}
	})
}

// The record of a second interface that cannot be read (damaged, or a
// newer cninet's) is kept byte for byte: the DEL of that interface runs
// no plugin and fails naming the file (cninet.ErrRecordUnreadable); the
// first interface's DEL is not held up by it.
func TestServeDelOfASecondInterfaceWhoseRecordIsDamaged(t *testing.T) {
	d := newDelegate(t, resultWithAddress)
	for _, ifName := range []string{"eth0", "net1"} {
		d.mustServe(t, "c1", CmdAdd, ifName, webConf)
	}
	store, err := registry.Open(d.state)
	if err != nil {
		t.Fatal(err)
	}
	recs, _, err := store.Of("c1.net1")
	if err != nil || len(recs) != 1 {
		t.Fatalf("the record of net1: %v, %v", recs, err)
	}
	damaged := recs[0].Path()
	if err := os.WriteFile(damaged, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = d.serve(t, CmdDel, "net1", "", webConf)
	if !errors.Is(err, cninet.ErrRecordUnreadable) || !strings.Contains(err.Error(), damaged) {
		t.Fatalf("DEL of net1 whose record is damaged: %v, want ErrRecordUnreadable naming %s", err, damaged)
	}
	if got := d.idsServed(t, CmdDel, "net1"); got != "" {
		t.Fatalf("the delegate's DELs of net1 ran as %q, want none", got)
	}
	if raw, err := os.ReadFile(damaged); err != nil || string(raw) != "{" {
		t.Fatalf("the damaged record after the DEL: %q, %v; want it kept", raw, err)
	}
	if res, err := d.c.CachedResult("c1.net1", "web", "net1"); err != nil || res == nil {
		t.Fatalf("net1's cached result after the refused DEL: %v, %v; want it kept", res, err)
	}
	d.mustServe(t, "c1", CmdDel, "eth0", webConf)
	if got := d.idsServed(t, CmdDel, "eth0"); got != "c1" {
		t.Fatalf("the delegate's DELs of eth0 ran as %q, want c1", got)
	}
}

func TestRecordedConfListIsFoundUnderTheDelegateID(t *testing.T) {
	d := newDelegate(t, resultWithAddress)
	for _, ifName := range []string{"eth0", "net1"} {
		d.mustServe(t, "c1", CmdAdd, ifName, webConf)
	}
	recs, err := d.c.Attachments("c1.net1")
	if err != nil || len(recs) != 1 || recs[0].RuntimeID != "c1" {
		t.Fatalf("the record of c1's net1: %+v, %v; want one under c1.net1 naming runtime id c1", recs, err)
	}
	list, err := recordedConfList(d.state, "c1", "web", "net1")
	if err != nil || !strings.Contains(string(list), `"name":"web"`) {
		t.Fatalf("recordedConfList of c1 as net1: %q, %v", list, err)
	}
}

// Two ADDs of one container on one network at once get one id each.
func TestServeConcurrentADDsOfOneNetworkGetOneIDEach(t *testing.T) {
	d := newDelegate(t, resultWithAddress)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, ifName := range []string{"eth0", "net1"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = d.serve(t, CmdAdd, ifName, "", webConf)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("ADD %d: %v", i, err)
		}
	}
	a, b := d.servedAs(t, CmdAdd, "eth0"), d.servedAs(t, CmdAdd, "net1")
	if a == "" || b == "" || a == b {
		t.Fatalf("the delegate's ADDs ran as %q and %q, want two ids (calls %q)", a, b, d.calls(t))
	}
}

// A runtime's GC names interfaces by container id; the delegate's
// plugins know the later ones by their delegate ids.
func TestServeGCKeepsTheInterfacesListedUnderTheirDelegateIDs(t *testing.T) {
	for _, tc := range []struct {
		name, valid        string
		wantEth0, wantNet1 bool
	}{
		{"both interfaces listed are kept", `[{"containerID":"c1","ifname":"eth0"},{"containerID":"c1","ifname":"net1"}]`, true, true},
		{"the second interface alone listed is kept, the first collected", `[{"containerID":"c1","ifname":"net1"}]`, false, true},
		{"the first interface alone listed is kept, the second collected", `[{"containerID":"c1","ifname":"eth0"}]`, true, false},
		{"the container listed without an interface keeps both", `[{"containerID":"c1"}]`, true, true},
		{"another container listed keeps neither", `[{"containerID":"c2"}]`, false, false},
		{"an entry that names the delegate id and interface as a container keeps that attachment", `[{"containerID":"c1.net1","ifname":"net1"}]`, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDelegate(t, resultWithAddress)
			for _, ifName := range []string{"eth0", "net1"} {
				d.mustServe(t, "c1", CmdAdd, ifName, webConf)
			}
			if err := d.gc(t, tc.valid); err != nil {
				t.Fatalf("GC: %v", err)
			}
			for _, c := range []struct {
				id, ifName string
				want       bool
			}{{"c1", "eth0", tc.wantEth0}, {"c1.net1", "net1", tc.wantNet1}} {
				res, err := d.c.CachedResult(c.id, "web", c.ifName)
				if err != nil {
					t.Fatal(err)
				}
				if kept := res != nil && d.servedAs(t, CmdDel, c.ifName) == ""; kept != c.want {
					t.Fatalf("after GC %s kept: %v, want %v (calls %q)", c.ifName, kept, c.want, d.calls(t))
				}
			}
		})
	}
}
