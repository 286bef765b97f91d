package cninet

import (
	"context"
	"errors"
	"testing"

	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
)

// On a host without iptables, a network whose plugins all use nftables
// there is cleaned without it: no error. One with the firewall plugin
// (iptables only) still says iptables is missing.
func TestTeardownWithoutIPTablesIsCompleteWhereNoPluginUsesIt(t *testing.T) {
	firewall := []byte(`{"cniVersion":"1.0.0","name":"n","plugins":[
		{"type":"bridge","ipMasq":true,"ipam":{"type":"host-local","subnet":"198.18.0.0/24"}},
		{"type":"firewall"},{"type":"portmap","capabilities":{"portMappings":true}}]}`)
	for _, tt := range []struct {
		name string
		conf []byte
		want error
	}{
		{"bridge and portmap on nftables: complete", []byte(`{"cniVersion":"1.0.0","name":"n","plugins":[
			{"type":"bridge","ipMasq":true,"ipam":{"type":"host-local","subnet":"198.18.0.0/24"}},
			{"type":"portmap","capabilities":{"portMappings":true}}]}`), nil},
		{"with the firewall plugin: iptables is missing", firewall, ErrIPTablesMissing},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := New(Config{ConfList: tt.conf, CNI: &fakes.CNI{}, CacheDir: t.TempDir(), StateDir: t.TempDir(), PluginDirs: []string{t.TempDir()},
				IPTables: func(bool) (host.IPTables, error) { return nil, errors.New("iptables: not found") },
				NFTables: func() (host.NFTables, error) { return &fakes.NFTables{}, nil }})
			if err != nil {
				t.Fatal(err)
			}
			err = c.Teardown(context.Background(), &Allocation{ID: "a"}, "")
			if (tt.want == nil) != (err == nil) || (tt.want != nil && !errors.Is(err, tt.want)) {
				t.Fatalf("Teardown = %v, want %v", err, tt.want)
			}
		})
	}
}
