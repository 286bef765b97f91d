package cninet

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
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
			if got := st.InterfaceName + " " + st.Address.String(); got != tc.want || st.DNS == nil || st.DNS.Servers[0] != "198.18.1.1" {
				t.Fatalf("status %+v, want %s with the result's DNS", st, tc.want)
			}
		})
	}
}

func TestStatusNamesEveryNetworkThatIsNotReady(t *testing.T) {
	cases := []struct {
		name     string
		plugins  []string
		notReady []string // networks the error must name
	}{
		{"every plugin present", []string{"loopback", "bridge", "firewall", "portmap", "ptp"}, nil},
		{"ptp missing: network c", []string{"loopback", "bridge", "firewall", "portmap"}, []string{`network "c"`}},
		{"portmap missing: networks a and b", []string{"loopback", "bridge", "firewall", "ptp"}, []string{`network "a"`, `network "b"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f := newMultiFixture(t, quickRetry, acceptAllPlugins(t, tc.plugins...))
			err := f.c.Status(context.Background())
			if len(tc.notReady) == 0 {
				if err != nil {
					t.Fatalf("Status = %v, want ready", err)
				}
				return
			}
			if !errors.Is(err, ErrNotReady) || !errors.Is(err, ErrPluginMissing) {
				t.Fatalf("Status = %v, want ErrNotReady and ErrPluginMissing", err)
			}
			for _, n := range tc.notReady {
				if !strings.Contains(err.Error(), n) {
					t.Errorf("Status does not name %s: %v", n, err)
				}
			}
			if strings.Count(err.Error(), "network \"") != len(tc.notReady) {
				t.Errorf("Status names ready networks too: %v", err)
			}
		})
	}
}
