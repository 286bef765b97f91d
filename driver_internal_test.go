package cninet

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"

	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/internal/attachments"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// The fake CNI offers a repair's extension: a fake that stopped would
// no longer compile here, where the repair's type assertion would
// silently take the path without it (the seams of package host are
// checked in fakes' seams.go).
var _ PluginAdder = (*fakes.CNI)(nil)

// The repair asserts an injected CNI against attachments.PluginAdder: it
// must have cninet.PluginAdder's methods, no more and no fewer, or a CNI
// that implements the documented one would silently not be used.
var (
	_ PluginAdder             = attachments.PluginAdder(nil)
	_ attachments.PluginAdder = PluginAdder(nil)
)

func TestResultFromCNIReadsAsGoCNIDoes(t *testing.T) {
	idx := func(i int) *int { return &i }
	addr := func(s string) net.IPNet { ip, n, _ := net.ParseCIDR(s); n.IP = ip; return *n }
	ifaces := []*types100.Interface{{Name: "br-b"}, {Name: "veth1"}, {Name: "eth1", Sandbox: "/x"}}
	cases := []struct {
		name    string
		res     *types100.Result
		want    string // interface and address StatusFromResult picks
		wantErr error
	}{
		{"an address naming its interface", &types100.Result{Interfaces: ifaces,
			IPs: []*types100.IPConfig{{Interface: idx(2), Address: addr("198.18.1.5/24")}}}, "eth1 198.18.1.5", nil},
		{"an address naming none belongs to the interface asked for", &types100.Result{
			IPs: []*types100.IPConfig{{Address: addr("198.18.1.6/24")}}}, "eth1 198.18.1.6", nil},
		{"an address naming an interface the result lacks", &types100.Result{Interfaces: ifaces,
			IPs: []*types100.IPConfig{{Interface: idx(3), Address: addr("198.18.1.7/24")}}}, "", ErrNoAddress},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.res.DNS = types.DNS{Nameservers: []string{"198.18.1.1"}}
			res, err := attachments.ResultFromCNI(tc.res, "eth1")
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				return
			}
			st, err := StatusFromResult(res)
			if err != nil {
				t.Fatal(err)
			}
			if got := st.IfName + " " + st.Address.String(); got != tc.want || st.DNS == nil || st.DNS.Servers[0] != "198.18.1.1" {
				t.Fatalf("status %+v, want %s with the result's DNS", st, tc.want)
			}
		})
	}
}

func TestLibcniIsToldThePortMappingsOnlyWhereTheConflistDeclaresThemAndTheArgsEverywhere(t *testing.T) {
	f := newMultiFixture(t, quickRetry)
	req, err := newRequest(&Allocation{ID: "w", Ports: []Port{{Value: 8080}}, Args: map[string]string{"K": "v"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		network  string
		mappings bool
	}{{"b", true}, {"c", false}} {
		t.Run(tc.network, func(t *testing.T) {
			conf, err := f.c.nets.Known(tc.network, false)
			if err != nil {
				t.Fatal(err)
			}
			att := attachments.Attachment{Conf: conf, IfName: "eth1"}
			rt := attachments.LibDriver{}.RuntimeConf(req, att, "/x")
			_, has := rt.CapabilityArgs["portMappings"]
			if has != tc.mappings || rt.IfName != "eth1" || rt.ContainerID != "w" || rt.NetNS != "/x" || !reflect.DeepEqual(rt.Args, req.Args) {
				t.Fatalf("runtime conf %+v: want port mappings %v and the args %v", rt, tc.mappings, req.Args)
			}
		})
	}
}

// pluginRuns is an invoke.Exec that runs no binary: it records each
// plugin's command and answers an ADD with one address.
type pluginRuns struct {
	mu   sync.Mutex
	runs []string
}

func (e *pluginRuns) ExecPlugin(_ context.Context, path string, _ []byte, environ []string) ([]byte, error) {
	cmd := ""
	for _, kv := range environ {
		if v, ok := strings.CutPrefix(kv, "CNI_COMMAND="); ok {
			cmd = v
		}
	}
	e.mu.Lock()
	e.runs = append(e.runs, cmd+" "+filepath.Base(path))
	e.mu.Unlock()
	if cmd == "ADD" {
		return []byte(`{"cniVersion":"1.0.0","ips":[{"address":"198.18.0.9/24"}]}`), nil
	}
	return nil, nil
}

func (e *pluginRuns) FindInPath(plugin string, _ []string) (string, error) {
	return "/plugins/" + plugin, nil
}

func (e *pluginRuns) Decode(b []byte) (version.PluginInfo, error) {
	return version.PluginSupports("1.0.0"), nil
}

// A DEL runs the plugins its filter lets run. A part of the chain apart
// from the network's own DEL (portmap's alone, for a whole workload)
// runs on no libcni cache: the network's own DEL after it still finds the
// cached result, and removes it.
func TestTheDriversDELRunsThePluginsItsFilterLetsRun(t *testing.T) {
	f := newMultiFixture(t, quickRetry)
	req, err := newRequest(&Allocation{ID: "w", Ports: []Port{{Value: 28080, To: 8080}}}, false)
	if err != nil {
		t.Fatal(err)
	}
	conf, err := f.c.nets.Known("b", false)
	if err != nil {
		t.Fatal(err)
	}
	att := attachments.Attachment{Conf: conf, IfName: "eth1"}
	if !slices.Contains(att.Conf.Info.PluginTypes, "portmap") {
		t.Fatalf("network b runs %q: want portmap in its chain", att.Conf.Info.PluginTypes)
	}
	exec := &pluginRuns{}
	cache, noCache := t.TempDir(), t.TempDir()
	d := attachments.LibDriver{Lib: libcni.NewCNIConfigWithCacheDir([]string{"/plugins"}, cache, exec),
		NoCache: libcni.NewCNIConfigWithCacheDir([]string{"/plugins"}, noCache, exec)}
	if _, _, err := d.Add(context.Background(), req, att, "/x"); err != nil {
		t.Fatal(err)
	}
	cached := func() int {
		left, _ := filepath.Glob(filepath.Join(cache, "results", "*"))
		return len(left)
	}
	if cached() != 1 {
		t.Fatal("the ADD cached no result")
	}
	for _, step := range []struct {
		name   string
		run    footprint.PluginFilter
		want   []string // the plugins' commands, in order
		cached bool     // libcni's cached result is still there after it
	}{
		{"portmap alone, apart: only portmap, the cached result kept", footprint.HostportsAlone, []string{"DEL portmap"}, true},
		{"the network's own DEL without portmap: every other plugin, the cached result removed", footprint.Without("portmap"),
			nil, false},
	} {
		exec.runs = nil
		if err := d.Del(context.Background(), req, att, "/x", step.run); err != nil {
			t.Fatalf("%s: %v", step.name, err)
		}
		want := step.want
		if want == nil {
			for _, typ := range slices.Backward(att.Conf.Info.PluginTypes) {
				if typ != "portmap" {
					want = append(want, "DEL "+typ)
				}
			}
		}
		if !slices.Equal(exec.runs, want) {
			t.Errorf("%s: ran %q, want %q", step.name, exec.runs, want)
		}
		if (cached() == 1) != step.cached {
			t.Errorf("%s: libcni's cached result there: %v, want %v", step.name, cached() == 1, step.cached)
		}
	}
}
