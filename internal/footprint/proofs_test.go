package footprint_test

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/seed1280861d/cninet/internal/footprint"
)

// memoryProofs is a ProofStore in memory, as durable as the test needs: it
// outlives the cleaners, as the host registry outlives a killed process.
type memoryProofs struct {
	mu     sync.Mutex
	byAtt  map[footprint.Attachment][]netip.Addr
	writes int
}

func (m *memoryProofs) Recorded(att footprint.Attachment) []netip.Addr {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.byAtt[att])
}

func (m *memoryProofs) Record(att footprint.Attachment, addrs []netip.Addr) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.byAtt == nil {
		m.byAtt = map[footprint.Attachment][]netip.Addr{}
	}
	for _, a := range addrs {
		if !slices.Contains(m.byAtt[att], a) {
			m.byAtt[att] = append(m.byAtt[att], a)
		}
	}
	m.writes++
	return nil
}

// An attachment that was never cached (its ADD failed, and a retry's or a
// rollback's DEL comes) is proven only by its reservation, which
// host-local's DEL erases; the firewall rules of its address name nobody.
// With a proof store, Prevent records the address before the DEL, and a
// runner killed right after the DEL loses nothing: the next Teardown
// removes the rules by the record. Without one (the control), nothing
// proves the address after the DEL, and its rules stay.
func TestAProofStoreKeepsTheProofOfAnUncachedAttachmentAcrossItsDEL(t *testing.T) {
	for _, tc := range []struct {
		name      string
		store     bool
		wantClean bool
	}{
		{"with a proof store the next Teardown removes the rules", true, true},
		{"without one nothing proves the address after the DEL", false, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, "leaked-no-del", nftnet1, "eth0", join(net1Dir3, live1Reserved,
				reservedBoth(nftnet1, "eth0", "ghost", "198.18.1.9", "fd00:198:18:0:1::9")))
			s.net = withFirewall(s.net)
			s.ipt[0].Load("filter", "-A CNI-FORWARD -d 198.18.1.9/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n-A CNI-FORWARD -s 198.18.1.9/32 -j ACCEPT")
			store := &memoryProofs{}
			seams := s.seams(s.nft)
			if tc.store {
				seams.Proofs = store
			}
			if _, err := footprint.NewCleaner(context.Background(), s.net, seams).Prevent([]string{"ghost"}); err != nil {
				t.Fatal(err)
			}
			// host-local's DEL, then the runner is killed before its cleanup
			for _, ip := range []string{"198.18.1.9", "fd00:198:18:0:1::9"} {
				if err := os.Remove(filepath.Join(s.net.IPAMDirs[0], ip)); err != nil {
					t.Fatal(err)
				}
			}
			restarted := footprint.NewCleaner(context.Background(), s.net, seams)
			if _, err := restarted.Prevent([]string{"ghost"}); err != nil {
				t.Fatal(err)
			}
			if _, err := restarted.Clean([]string{"ghost"}); err != nil {
				t.Fatal(err)
			}
			left := slices.ContainsFunc(s.ipt[0].Rules("filter", "CNI-FORWARD"), func(r string) bool { return strings.Contains(r, "198.18.1.9/32") })
			if left == tc.wantClean {
				t.Fatalf("firewall rules of 198.18.1.9 left %v, want %v: %v", left, !tc.wantClean, s.ipt[0].Rules("filter", "CNI-FORWARD"))
			}
			if tc.store {
				if got := store.Recorded(footprint.Attachment{Network: nftnet1, ID: "ghost"}); len(got) != 2 {
					t.Errorf("recorded %v, want both reserved addresses", got)
				}
				if _, err := os.Stat(filepath.Join(s.net.CacheDir, "cninet", "withheld")); !os.IsNotExist(err) {
					t.Errorf("an intent record was written beside the proof store: %v", err)
				}
			}
		})
	}
}
