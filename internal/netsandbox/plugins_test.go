package netsandbox

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// A plugin set that cannot run here is left out alone: the others run.
func TestAMissingPluginSetLeavesOutOnlyThatSet(t *testing.T) {
	installed, absent := t.TempDir(), t.TempDir()
	if err := os.WriteFile(filepath.Join(installed, "bridge"), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	debian := PluginSet{"debian", installed, "iptables"}
	upstream := PluginSet{"upstream", installed, "iptables"}
	upstreamNFT := PluginSet{"upstream-nftables", installed, "nftables"}
	gone := PluginSet{"gone", absent, "iptables"}
	cases := []struct {
		name    string
		sets    []PluginSet
		nft     bool
		want    []PluginSet
		wantWhy []string
	}{
		{"all installed, nft too: every set", []PluginSet{debian, upstream, upstreamNFT}, true, []PluginSet{debian, upstream, upstreamNFT}, nil},
		{"no nft: only the nftables set is left out", []PluginSet{debian, upstream, upstreamNFT}, false, []PluginSet{debian, upstream}, []string{"upstream-nftables needs nft"}},
		{"a set not installed: only it is left out", []PluginSet{gone, upstream}, true, []PluginSet{upstream}, []string{"gone is not installed"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			old := lookPath
			defer func() { lookPath = old }()
			lookPath = func(name string) (string, error) {
				if c.nft {
					return "/usr/sbin/" + name, nil
				}
				return "", errors.New("not found")
			}
			found, missing := available(c.sets)
			if !reflect.DeepEqual(found, c.want) || len(missing) != len(c.wantWhy) {
				t.Fatalf("found %v, missing %q; want %v and %d missing", found, missing, c.want, len(c.wantWhy))
			}
			for i, why := range c.wantWhy {
				if !strings.Contains(missing[i], why) {
					t.Errorf("missing %q, want it to say %q", missing[i], why)
				}
			}
		})
	}
}
