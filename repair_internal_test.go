package cninet

import (
	"context"
	"os"
	"reflect"
	"testing"

	cni "github.com/containerd/go-cni"
	"github.com/seed1280861d/cninet/internal/attachments"
	"github.com/seed1280861d/cninet/internal/drift"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// libcni's cache file, written again by a repair, reads back through
// libcni itself as what its ADD cached: the result, the args and the
// capability arguments the network declares.
func TestACachedResultWrittenAgainReadsAsLibcnisOwn(t *testing.T) {
	f := newMultiFixture(t, quickRetry)
	conf, err := f.c.nets.Known("b", false)
	if err != nil {
		t.Fatal(err)
	}
	req := attachments.Request{ID: "w", Args: [][2]string{{"IgnoreUnknown", "1"}},
		Mappings: []cni.PortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}}}
	fa := attachments.Found{Att: attachments.Attachment{Conf: conf, IfName: "eth1"}, Req: req}
	raw := `{"cniVersion":"1.0.0","interfaces":[{"name":"eth1","mac":"0a:58:c6:12:01:02","sandbox":"/x"}],` +
		`"ips":[{"interface":0,"address":"198.18.1.2/24","gateway":"198.18.1.1"}]}`
	live := &footprint.Live{NetNS: "/x", Net: footprint.Network{CacheDir: f.c.cacheDir}, Result: &footprint.Result{Raw: []byte(raw)}}
	if err := f.c.checker.repairer.WriteCachedResult(fa, live); err != nil {
		t.Fatal(err)
	}
	rt := attachments.RuntimeConfOf(req, fa.Att, "/x")
	res, err := f.c.lib.GetNetworkListCachedResult(conf.List, rt)
	if err != nil || res == nil {
		t.Fatalf("libcni reads no result: %v, %v", res, err)
	}
	want, _ := drift.LiveResult(live)
	if got, _ := res.GetAsVersion("1.0.0"); !reflect.DeepEqual(got, want) {
		t.Fatalf("libcni reads %v, want %v", got, want)
	}
	atts, err := f.c.lib.GetCachedAttachments("w")
	if err != nil || len(atts) != 1 {
		t.Fatalf("cached attachments %+v, %v", atts, err)
	}
	a := atts[0]
	if a.Network != "b" || a.IfName != "eth1" || a.NetNS != "/x" || !reflect.DeepEqual(a.CniArgs, req.Args) || a.CapabilityArgs["portMappings"] == nil {
		t.Fatalf("cached attachment %+v, want b as eth1 in /x with the request's args and port mappings", a)
	}
	path := f.c.cacheDir + "/results/b-w-eth1"
	before, _ := os.ReadFile(path)
	if err := f.c.checker.repairer.WriteCachedResult(fa, live); err != nil {
		t.Fatalf("writing over libcni's own: %v", err)
	}
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatal("a cache file already there was written over: libcni's own is kept")
	}
}

// A record says which way its ADD ran, so that a repair of it long after
// (the watcher's, from the record alone) runs the plugins the same way
// and knows whether libcni's cache is where cninet looks.
func TestARecordSaysWhetherItsADDRanThroughConfigCNI(t *testing.T) {
	f := newMultiFixture(t, quickRetry)
	alloc := &Allocation{ID: "w", NetworkNames: []string{"a"}}
	if _, err := f.c.Setup(context.Background(), alloc, "/x"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.c.Connect(context.Background(), alloc, "c", "/x"); err != nil {
		t.Fatal(err)
	}
	for network, want := range map[string]bool{"a": true, "c": false} {
		rec := f.c.registry.Recorded("w", network, map[string]string{"a": "eth0", "c": "eth1"}[network])
		if rec == nil || rec.ViaCNI != want {
			t.Fatalf("record of %s: %+v, want viaCNI %v", network, rec, want)
		}
		ca, ok := f.c.checker.lives.CheckedOfRecord(rec)
		if !ok || ca.Found.Att.ViaCNI != want || ca.Live.Uncached != want {
			t.Fatalf("the attachment %s's record gives: viaCNI %v, uncached %v; want both %v", network, ca.Found.Att.ViaCNI, ca.Live.Uncached, want)
		}
	}
}
