package footprint_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/seed1280861d/cninet/internal/footprint"
)

// GC guards what libcni's GC DEL of a stale attachment may take from other
// attachments, then sweeps. Whatever happened meanwhile, it never adds
// back a rule of an id that is dead, or whose other attachment was torn
// down in between: that would map a port to an address host-local has
// freed.
func TestGCAddsBackOnlyWhatALiveHolderStillHolds(t *testing.T) {
	for _, tc := range []struct {
		name         string
		live         bool // same-1 is live (on nftnet2)
		tornDown     bool // a Teardown of same-1 on nftnet2 ran between libcni's GC and the sweep
		wantRestored bool
	}{
		{"the DEL of a stale nftnet1 attachment of a live id: nftnet2's rules are added back", true, false, true},
		{"the id is dead: nothing is added back", false, false, false},
		{"a Teardown of nftnet2 finished meanwhile: nothing is added back", true, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, "two-networks-same-id", nftnet1, "eth0", join(same1Net1Files, same1Net2Files))
			s.net.HostportNFT = true
			net2 := footprint.Network{Name: nftnet2, IfName: "eth1", IPAMDirs: []string{filepath.Join(s.root, "ipam", nftnet2)},
				CacheDir: s.net.CacheDir, HostportNFT: true}
			host := s.host(s.nft)
			host.Networks = []footprint.Network{s.net, net2}
			sweep := footprint.NewSweep(context.Background(), host)
			sweep.Live = func(a footprint.Attachment) bool { return tc.live && a.ID == "same-1" }
			stale := footprint.Attachment{Network: nftnet1, ID: "same-1"}
			if err := sweep.RememberAll([]footprint.Attachment{stale}); err != nil {
				t.Fatal(err)
			}
			net2Before := hostportRules(s.nft.Rules(), "198.18.2.")
			delByID(t, s.nft, "same-1") // libcni's GC DELs the stale attachment
			if tc.tornDown {
				s.remove(t, same1Net2Paths())
				for _, r := range s.nft.Rules() {
					if r.Table == "cni_plugins_masquerade" && r.Comment == (footprint.Attachment{Network: nftnet2, ID: "same-1"}).NFTMasqComment("eth1") {
						if err := s.nft.DeleteRules(context.Background(), footprint.NFTable{Family: r.Family, Name: r.Table}, []footprint.NFTRule{r}); err != nil {
							t.Fatal(err)
						}
					}
				}
			}
			if _, err := sweep.DiscoverAll(); err != nil {
				t.Fatal(err)
			}
			if err := sweep.CleanAll([]footprint.Attachment{stale}); err != nil {
				t.Fatal(err)
			}
			got := hostportRules(s.nft.Rules(), "198.18.2.")
			if restored := len(got) == len(net2Before) && len(got) > 0; restored != tc.wantRestored {
				t.Errorf("nftnet2's hostport rules after GC: %q (before %q), want restored %v; Restored() = %v",
					got, net2Before, tc.wantRestored, sweep.Restored())
			}
		})
	}
}

// same1Net2Paths are the files of same-1's nftnet2 attachment.
func same1Net2Paths() []string {
	var paths []string
	for _, f := range same1Net2Files {
		paths = append(paths, f.path)
	}
	return paths
}
