package cninet_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/cninettest/fakes"
)

func namedConfList(name string) []byte {
	return []byte(fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"bridge"}]}`, name))
}

func TestTheKnownNetworksAndTheDefault(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"zeta", "alpha"} {
		if _, err := cninet.WriteConfList(dir, namedConfList(n)); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		name     string
		cfg      cninet.Config
		networks string // default first
		want     error
	}{
		{"ConfList alone: one network, as before", cninet.Config{ConfList: namedConfList("one")}, "one", nil},
		{"ConfList and ConfLists", cninet.Config{ConfList: namedConfList("one"), ConfLists: [][]byte{namedConfList("two")}}, "one two", nil},
		{"ConfLists alone: the first is the default", cninet.Config{ConfLists: [][]byte{namedConfList("two"), namedConfList("one")}}, "two one", nil},
		{"ConfDir with NetworkName", cninet.Config{ConfDir: dir, NetworkName: "zeta"}, "zeta alpha", nil},
		{"ConfDir without NetworkName: the first file's network", cninet.Config{ConfDir: dir}, "alpha zeta", nil},
		{"ConfDir and ConfLists", cninet.Config{ConfDir: dir, NetworkName: "zeta", ConfLists: [][]byte{namedConfList("beta")}}, "zeta alpha beta", nil},
		{"ConfList wins over ConfDir, which is not read", cninet.Config{ConfDir: dir, ConfList: namedConfList("one")}, "one", nil},
		{"a network given twice as bytes", cninet.Config{ConfList: namedConfList("one"), ConfLists: [][]byte{namedConfList("one")}}, "", cninet.ErrInvalidConfig},
		{"a malformed ConfLists entry", cninet.Config{ConfList: namedConfList("one"), ConfLists: [][]byte{[]byte("{")}}, "", cninet.ErrInvalidConfig},
		{"a NetworkName in neither", cninet.Config{ConfDir: dir, NetworkName: "beta"}, "", cninet.ErrNetworkNotFound},
		{"an empty ConfDir", cninet.Config{ConfDir: t.TempDir()}, "", cninet.ErrNetworkNotFound},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tc.cfg.CNI, tc.cfg.CacheDir, tc.cfg.NFTables = &fakes.CNI{}, t.TempDir(), noNFTables
			c, err := cninet.New(tc.cfg)
			if tc.want != nil {
				if !errors.Is(err, tc.want) {
					t.Fatalf("err = %v, want %v", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if got := strings.Join(c.Networks(), " "); got != tc.networks || c.NetworkName() != strings.Fields(tc.networks)[0] {
				t.Fatalf("Networks() = %q, NetworkName() = %q; want %q", got, c.NetworkName(), tc.networks)
			}
		})
	}
}
