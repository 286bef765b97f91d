package footprint_test

import (
	"context"
	"slices"
	"testing"

	"github.com/seed1280861d/cninet/internal/footprint"
)

// The decision of how the detach is made asks the host itself: same-1 is
// attached to nftnet1 and nftnet2, both with nftables portmap, and each
// case reads the captured rules and files.
func TestTheDetachsDecisionReadsTheHostsHostportRules(t *testing.T) {
	cases := []struct {
		name     string
		files    [][]hostFile // besides same-1's on nftnet1
		drop     []string     // rules taken out of the capture first
		detach   func(n1, n2 footprint.Network) footprint.Detach
		omitted  bool   // portmap left out of nftnet1's DEL
		first    string // where portmap's DEL runs first for the whole workload
		asked    bool   // the host was asked whether portmap's DEL reaches only the leaving attachments
		notOwn   bool   // the host's answer kept portmap's DEL from running
		workload bool   // the whole detach's prevention, not one network's
	}{
		{name: "a Disconnect of the exact attachment whose hostport rules are the id's only ones: portmap runs",
			drop: secondHostport,
			detach: func(n1, _ footprint.Network) footprint.Detach {
				return footprint.Detach{Others: true, Exact: true, Leaving: []footprint.Leaving{{Network: n1, ID: "same-1", PortMappings: true}}}
			}, asked: true},
		{name: "a Disconnect of a network, not an exact attachment: portmap is left out",
			drop: secondHostport,
			detach: func(n1, _ footprint.Network) footprint.Detach {
				return footprint.Detach{Others: true, Leaving: []footprint.Leaving{{Network: n1, ID: "same-1", PortMappings: true}}}
			}, omitted: true},
		{name: "a whole workload leaving both networks: portmap's DEL runs first, on nftnet1", workload: true,
			files: [][]hostFile{same1Net2Files},
			detach: func(n1, n2 footprint.Network) footprint.Detach {
				return footprint.Detach{Leaving: []footprint.Leaving{{Network: n1, ID: "same-1", PortMappings: true}, {Network: n2, ID: "same-1", PortMappings: true}}}
			}, first: nftnet1, asked: true},
		{name: "a workload leaving nftnet1 and a network without rules while nftnet2 holds the id's: no DEL first", workload: true,
			detach: func(n1, _ footprint.Network) footprint.Detach {
				return footprint.Detach{Leaving: []footprint.Leaving{{Network: n1, ID: "same-1", PortMappings: true}, {Network: footprint.Network{Name: nftnet3}, ID: "same-1"}}}
			}, asked: true, notOwn: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, "two-networks-same-id", nftnet1, "eth0", join(append([][]hostFile{same1Net1Files}, tc.files...)...), tc.drop...)
			n1 := s.net
			n1.HostportNFT = true
			n2 := scenarioNetwork(s.root, nftnet2, "eth1")
			n2.HostportNFT = true
			seams := s.seams(s.nft)
			seams.Networks = []footprint.Network{n1, n2}
			detach := tc.detach(n1, n2)
			var p footprint.Prevention
			if tc.workload {
				p = detach.PreventWorkload(context.Background(), func() footprint.Seams { return seams })
			} else {
				cl := footprint.NewCleaner(context.Background(), n1, seams)
				cl.Detach = detach
				var err error
				if p, err = cl.Prevent([]string{"same-1"}); err != nil {
					t.Fatal(err)
				}
			}
			if omitted := slices.Contains(p.Omit, "portmap"); omitted != tc.omitted {
				t.Errorf("Omit = %q, want portmap left out: %v", p.Omit, tc.omitted)
			}
			var first string
			if p.HostportsFirst != nil {
				first = p.HostportsFirst.Network.Name
			}
			if first != tc.first {
				t.Errorf("portmap's DEL runs first on %q, want %q", first, tc.first)
			}
			if p.Hostports.Asked != tc.asked || p.Hostports.NotOwn() != tc.notOwn || p.Hostports.Err != nil {
				t.Errorf("Hostports = %+v, want the host asked %v, NotOwn %v", p.Hostports, tc.asked, tc.notOwn)
			}
		})
	}
}
