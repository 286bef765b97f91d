package footprint_test

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// masq is the bridge plugin's nftables masquerade rule of (network, id) on
// interface ifName.
func masq(network, id, ifName, addr string, handle int) host.NFTRule {
	return host.NFTRule{Family: "inet", Table: "cni_plugins_masquerade", Chain: "masq_checks", Handle: handle,
		Comment: footprint.Attachment{Network: network, ID: id}.NFTMasqComment(ifName), Saddr: netip.MustParseAddr(addr)}
}

func hostWith(nft *fakes.NFTables) footprint.Seams {
	ipt := fakes.NewIPTables()
	return footprint.Seams{
		IPTables: func(bool) (host.IPTables, error) { return ipt, nil },
		NFTables: func() (host.NFTables, error) { return nft, nil },
	}
}

// A workload that joins several networks has eth0 on one and eth1 on
// another, so one network's attachments carry different interface names
// in their masquerade comments; GC must see all of them.
func TestGCScanOfANetworkFindsAttachmentsUnderEveryCandidateInterfaceName(t *testing.T) {
	cases := []struct {
		name    string
		ifNames []string
		found   []string
		left    []string // ids whose rules survive cleaning the dead ones
	}{
		{"eth0 only sees only eth0's attachments", nil, []string{"dead-0"}, []string{"dead-1", "live"}},
		{"eth0 and eth1 see both", []string{"eth0", "eth1"}, []string{"dead-0", "dead-1", "live"}, []string{"live"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			nft := &fakes.NFTables{}
			nft.Add(masq("n", "dead-0", "eth0", "198.18.0.2", 1), masq("n", "dead-1", "eth1", "198.18.0.3", 2),
				masq("n", "live", "eth1", "198.18.0.4", 3), masq("other", "dead-2", "eth1", "198.18.1.2", 4))
			cl := footprint.NewCleaner(context.Background(),
				footprint.Network{Name: "n", IfName: "eth0", IfNames: tc.ifNames, CacheDir: t.TempDir()}, hostWith(nft))
			if got, err := cl.Discover(); err != nil || !reflect.DeepEqual(got, tc.found) {
				t.Fatalf("Discover = %v, want %v", got, tc.found)
			}
			var dead []string
			for _, id := range tc.found {
				if id != "live" {
					dead = append(dead, id)
				}
			}
			if _, err := cl.Clean(dead); err != nil {
				t.Fatal(err)
			}
			var left []string
			for _, r := range nft.Rules() {
				for _, id := range []string{"dead-0", "dead-1", "live"} {
					if r.Comment == (footprint.Attachment{Network: "n", ID: id}).NFTMasqComment("eth0") ||
						r.Comment == (footprint.Attachment{Network: "n", ID: id}).NFTMasqComment("eth1") {
						left = append(left, id)
					}
				}
			}
			if !reflect.DeepEqual(left, tc.left) {
				t.Fatalf("rules left for %v, want %v", left, tc.left)
			}
			if n := len(nft.Rules()); n != len(tc.left)+1 {
				t.Fatalf("%d rules left, want the other network's rule too", n)
			}
		})
	}
}

// Teardown of a workload's second network looks up libcni's cache file
// under that network's interface name.
func TestTeardownScanFindsTheCachedResultUnderTheAttachmentsInterfaceName(t *testing.T) {
	for _, ifName := range []string{"eth0", "eth1"} {
		t.Run(ifName, func(t *testing.T) {
			cache := t.TempDir()
			path := filepath.Join(cache, "results", "n-a-eth1")
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				t.Fatal(err)
			}
			body := `{"kind":"cniCacheV1","containerId":"a","ifName":"eth1","networkName":"n","result":{"ips":[{"address":"198.18.0.2/24"}]}}`
			if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			cl := footprint.NewCleaner(context.Background(), footprint.Network{Name: "n", IfName: ifName, CacheDir: cache}, hostWith(&fakes.NFTables{}))
			cl.Prevent([]string{"a"})
			if _, err := cl.Clean([]string{"a"}); err != nil {
				t.Fatal(err)
			}
			_, err := os.Stat(path)
			if gone := os.IsNotExist(err); gone != (ifName == "eth1") {
				t.Fatalf("cache file removed: %v, want %v", gone, ifName == "eth1")
			}
		})
	}
}
