package catalog

import (
	"errors"
	"fmt"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/iptables"
	"github.com/seed1280861d/cninet/internal/nftables"
)

// twoPluginConf is a conflist of bridge (ipMasq) and portmap, each given
// the extra JSON fields.
func twoPluginConf(bridgeExtra, portmapExtra string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":"n","plugins":[
		{"type":"bridge","ipMasq":true%s,"ipam":{"type":"host-local","subnet":"198.18.0.0/24"}},
		{"type":"portmap","capabilities":{"portMappings":true}%s}]}`, bridgeExtra, portmapExtra))
}

func TestTheBackendAPluginUsesOnThisHost(t *testing.T) {
	noIPT := func(bool) (host.IPTables, error) {
		return nil, errors.New(`exec: "iptables": executable file not found in $PATH`)
	}
	withIPT := func(bool) (host.IPTables, error) { return fakes.NewIPTables(), nil }
	withNFT := func() (host.NFTables, error) { return &fakes.NFTables{}, nil }
	noNFT := func() (host.NFTables, error) { return nil, host.ErrNFTablesMissing }
	tests := []struct {
		name         string
		conf         []byte
		ipt          func(bool) (host.IPTables, error)
		nft          func() (host.NFTables, error)
		wantHostport bool
		wantIPTables bool
	}{
		{"no backend named, iptables here: iptables", twoPluginConf("", ""), withIPT, withNFT, false, true},
		{"no backend named, no iptables here, nft here: the plugins pick nftables", twoPluginConf("", ""), noIPT, withNFT, true, false},
		{"no backend named, neither here: iptables (and the plugins fail)", twoPluginConf("", ""), noIPT, noNFT, false, true},
		{"backend named: that one, whatever the host has", twoPluginConf(`,"ipMasqBackend":"iptables"`, `,"backend":"iptables"`), noIPT, withNFT, false, true},
		{"nftables named: nftables", twoPluginConf(`,"ipMasqBackend":"nftables"`, `,"backend":"nftables"`), withIPT, withNFT, true, false},
		{"portmap's iptables conditions imply iptables", twoPluginConf(`,"ipMasqBackend":"nftables"`, `,"conditionsV4":["-d","198.18.0.0/24"]`), noIPT, withNFT, false, true},
		{"portmap's nftables conditions imply nftables", twoPluginConf(`,"ipMasqBackend":"nftables"`, `,"conditionsV4":["ip","daddr","198.18.0.0/24"]`), withIPT, withNFT, true, false},
		{"bridge without ipMasq writes no rule", twoPluginConf(`,"ipMasq":false`, `,"backend":"nftables"`), withIPT, withNFT, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dirs := []string{t.TempDir()}
			p := NewPlugins(dirs, libcni.NewCNIConfig(dirs, nil), &iptables.Opener{Open: tt.ipt}, &nftables.Opener{Open: tt.nft})
			conf, err := Parse(tt.conf)
			if err != nil {
				t.Fatal(err)
			}
			if got := p.HostportNFT(conf); got != tt.wantHostport {
				t.Errorf("portmap on nftables = %v, want %v", got, tt.wantHostport)
			}
			if got := p.NeedsIPTables(conf); got != tt.wantIPTables {
				t.Errorf("needs iptables = %v, want %v", got, tt.wantIPTables)
			}
		})
	}
}
