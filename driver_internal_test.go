package cninet

import (
	"errors"
	"net"
	"reflect"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"

	"github.com/seed1280861d/cninet/cninettest/fakes"
)

// The fake CNI offers a repair's extension: a fake that stopped would
// no longer compile here, where the repair's type assertion would
// silently take the path without it (the seams of package host are
// checked in fakes' seams.go).
var _ PluginAdder = (*fakes.CNI)(nil)

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
			res, err := resultFromCNI(tc.res, "eth1")
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
			att := attachment{conf: conf, ifName: "eth1"}
			rt := libDriver{}.runtimeConf(req, att, "/x")
			_, has := rt.CapabilityArgs["portMappings"]
			if has != tc.mappings || rt.IfName != "eth1" || rt.ContainerID != "w" || rt.NetNS != "/x" || !reflect.DeepEqual(rt.Args, req.args) {
				t.Fatalf("runtime conf %+v: want port mappings %v and the args %v", rt, tc.mappings, req.args)
			}
		})
	}
}
