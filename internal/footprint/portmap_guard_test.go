package footprint_test

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// delByID does exactly what portmap's nftables DEL (v1.9.1) does: in both
// families, whatever the attachment's addresses, it deletes every rule of
// hostports, hostip_hostports and masquerading whose comment is id, of
// whatever network, and nothing of any other chain.
func delByID(t *testing.T, nft *fakes.NFTables, id string) {
	t.Helper()
	for _, r := range nft.Rules() {
		if r.Table == "cni_hostport" && r.Comment == id && slices.Contains([]string{"hostports", "hostip_hostports", "masquerading"}, r.Chain) {
			if err := nft.DeleteRules(context.Background(), host.NFTable{Family: r.Family, Name: r.Table}, []host.NFTRule{r}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func hostportRules(rules []host.NFTRule, addrPrefix string) []string {
	var out []string
	for _, r := range rules {
		if s := r.String(); r.Table == "cni_hostport" && r.Comment != "" && strings.Contains(s, addrPrefix) {
			out = append(out, strings.SplitN(s, " handle ", 2)[1][strings.Index(strings.SplitN(s, " handle ", 2)[1], " "):])
		}
	}
	slices.Sort(out)
	return out
}

// delByIDUnlessOmitted is a DEL chain run as Prevent left it: portmap's
// nftables DEL (delByID) unless Prevent left portmap out.
func delByIDUnlessOmitted(id string) func(t *testing.T, s *scenario, p footprint.Prevention) {
	return func(t *testing.T, s *scenario, p footprint.Prevention) {
		if !slices.Contains(p.Omit, "portmap") {
			delByID(t, s.nft, id)
		}
	}
}

func TestTheOtherNetworksPortMappingsOfTheSameIDAreNeverTouchedByItsDEL(t *testing.T) {
	cases := []struct {
		name        string
		hostportNFT bool     // the conflist's portmap uses nftables
		drop        []string // rules taken out of the capture first
		whole       bool     // the whole workload is torn down, network 2 too
		omitted     bool     // portmap is left out of the DEL
	}{
		{"portmap is left out while network 2 has rules of the same id", true, nil, false, true},
		{"a portmap on iptables is never left out", false, nil, false, false},
		{"rules of the same id nobody provably holds still keep portmap out", true, []string{
			"inet masq_checks 11", "inet masq_checks 12"}, false, true}, // nftnet2's masquerade rules: its proof
		{"the whole workload goes: portmap's DEL runs", true, nil, true, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, "two-networks-same-id", nftnet1, "eth0", join(same1Net1Files), tc.drop...)
			s.net.HostportNFT = tc.hostportNFT
			net2Before := hostportRules(s.nft.Rules(), "198.18.2.")
			net2Before = append(net2Before, hostportRules(s.nft.Rules(), "fd00:198:18:0:2:")...)
			if len(net2Before) == 0 {
				t.Fatal("the capture has no hostport rules of network 2")
			}
			cl := footprint.NewCleaner(context.Background(), s.net, s.seams(s.nft))
			cl.WholeWorkload = tc.whole
			p, err := cl.Prevent([]string{"same-1"})
			if err != nil {
				t.Fatal(err)
			}
			if omitted := slices.Contains(p.Omit, "portmap"); omitted != tc.omitted {
				t.Fatalf("Omit = %q, want portmap left out: %v", p.Omit, tc.omitted)
			}
			if tc.hostportNFT {
				delByIDUnlessOmitted("same-1")(t, s, p)
			}
			if _, err := cl.Clean([]string{"same-1"}); err != nil {
				t.Fatal(err)
			}
			net2After := append(hostportRules(s.nft.Rules(), "198.18.2."), hostportRules(s.nft.Rules(), "fd00:198:18:0:2:")...)
			if kept := slices.Equal(net2After, net2Before); kept != !tc.whole {
				t.Errorf("network 2's hostport rules after network 1's DEL: %q, before: %q, want kept %v", net2After, net2Before, !tc.whole)
			}
			if left := append(hostportRules(s.nft.Rules(), "198.18.1."), hostportRules(s.nft.Rules(), "fd00:198:18:0:1:")...); len(left) > 0 {
				t.Errorf("network 1's own hostport rules are left: %q", left)
			}
		})
	}
}
