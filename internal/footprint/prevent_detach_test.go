package footprint

import (
	"errors"
	"slices"
	"testing"
)

// hostAnswer is a fake host for the decision: what it answers when asked
// whether portmap's nftables DEL reaches only the given attachments, and
// what it was asked.
type hostAnswer struct {
	only  bool
	err   error
	asked [][]Attachment
	first []string // the network each question ran on
}

func (h *hostAnswer) reach(first Network, atts []Attachment) (bool, error) {
	h.asked = append(h.asked, atts)
	h.first = append(h.first, first.Name)
	return h.only, h.err
}

// detachNet is a network of the decision's tests: its chain, and whether
// its portmap uses nftables.
func detachNet(name string, hostportNFT bool, types ...string) Network {
	n := Network{Name: name, IfName: "eth0", HostportNFT: hostportNFT}
	for _, typ := range types {
		n.Plugins = append(n.Plugins, Plugin{Type: typ})
	}
	return n
}

var (
	nftPortmapNet  = detachNet("n1", true, "loopback", "bridge", "portmap")
	nftPortmapNet2 = detachNet("n2", true, "bridge", "portmap")
	iptPortmapNet  = detachNet("n3", false, "loopback", "bridge", "portmap")
	noLoopbackNet  = detachNet("n4", false, "bridge")
)

func leaving(n Network, mappings bool) Leaving {
	return Leaving{Network: n, ID: "w", PortMappings: mappings}
}

func TestHowTheDetachIsMadeDecidesWhatEachDELMayRun(t *testing.T) {
	errUnreadable := errors.New("nftables cannot be read")
	cases := []struct {
		name       string
		detach     Detach
		net        Network
		omitBefore []string // what the host's rules made Prevent leave out already
		host       hostAnswer
		omit       []string
		loopback   bool // the loopback plugin is left out
		asked      bool // the host was asked whether portmap's DEL reaches only this attachment
	}{
		{name: "the workload keeps nothing else: every plugin runs",
			detach: Detach{Leaving: []Leaving{leaving(nftPortmapNet, true)}}, net: nftPortmapNet},
		{name: "alongside other networks on nftables portmap, portmap is left out unless the host holds only this attachment's hostport rules",
			detach: Detach{Leaving: []Leaving{leaving(nftPortmapNet, true)}, Others: true}, net: nftPortmapNet, omit: []string{"portmap"}},
		{name: "several networks leaving at once are alongside one another: portmap is left out of each",
			detach: Detach{Leaving: []Leaving{leaving(nftPortmapNet, true), leaving(nftPortmapNet2, true)}}, net: nftPortmapNet, omit: []string{"portmap"}},
		{name: "alongside other networks on iptables portmap, portmap runs: its DEL deletes by the attachment's own chain",
			detach: Detach{Leaving: []Leaving{leaving(iptPortmapNet, true)}, Others: true}, net: iptPortmapNet},
		{name: "an exact attachment whose hostport rules are the only ones of the id on the host: portmap runs",
			detach: Detach{Leaving: []Leaving{leaving(nftPortmapNet, true)}, Others: true, Exact: true}, net: nftPortmapNet,
			host: hostAnswer{only: true}, asked: true},
		{name: "an exact attachment while the host holds another attachment's hostport rules of the id: portmap is left out",
			detach: Detach{Leaving: []Leaving{leaving(nftPortmapNet, true)}, Others: true, Exact: true}, net: nftPortmapNet,
			host: hostAnswer{only: false}, omit: []string{"portmap"}, asked: true},
		{name: "an exact attachment whose hostport rules cannot be read: portmap is left out",
			detach: Detach{Leaving: []Leaving{leaving(nftPortmapNet, true)}, Others: true, Exact: true}, net: nftPortmapNet,
			host: hostAnswer{only: true, err: errUnreadable}, omit: []string{"portmap"}, asked: true},
		{name: "an exact attachment whose DEL hands portmap no mappings: portmap is left out, the host is not asked",
			detach: Detach{Leaving: []Leaving{leaving(nftPortmapNet, false)}, Others: true, Exact: true}, net: nftPortmapNet,
			host: hostAnswer{only: true}, omit: []string{"portmap"}},
		{name: "portmap the host's rules left out already is left out once, the host not asked again",
			detach: Detach{Leaving: []Leaving{leaving(nftPortmapNet, true)}, Others: true, Exact: true}, net: nftPortmapNet,
			omitBefore: []string{"portmap"}, host: hostAnswer{only: true}, omit: []string{"portmap"}},
		{name: "lo up and the workload keeps other networks: loopback left out",
			detach: Detach{Leaving: []Leaving{leaving(iptPortmapNet, false)}, Others: true, LoopbackUp: true}, net: iptPortmapNet, loopback: true},
		{name: "lo up on a network without the loopback plugin: nothing left out",
			detach: Detach{Leaving: []Leaving{leaving(noLoopbackNet, false)}, Others: true, LoopbackUp: true}, net: noLoopbackNet},
		{name: "lo up, but the DEL runs whole chains only: loopback runs (lo is set up again after)",
			detach: Detach{Leaving: []Leaving{{Network: iptPortmapNet, ID: "w", WholeChain: true}}, Others: true, LoopbackUp: true}, net: iptPortmapNet},
		{name: "lo down: loopback runs",
			detach: Detach{Leaving: []Leaving{leaving(iptPortmapNet, false)}, Others: true}, net: iptPortmapNet},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := Prevention{Omit: slices.Clone(tc.omitBefore)}
			tc.detach.decide(Attachment{Network: tc.net.Name, ID: "w"}, tc.net, &p, tc.host.reach)
			if !slices.Equal(p.Omit, tc.omit) {
				t.Errorf("Omit = %q, want %q", p.Omit, tc.omit)
			}
			if p.OmitLoopback != tc.loopback {
				t.Errorf("OmitLoopback = %v, want %v", p.OmitLoopback, tc.loopback)
			}
			if asked := len(tc.host.asked) > 0; asked != tc.asked || p.Hostports.Asked != tc.asked {
				t.Errorf("the host asked: %v (Hostports %+v), want %v", asked, p.Hostports, tc.asked)
			}
			if tc.asked && !slices.Equal(tc.host.asked[0], []Attachment{{Network: tc.net.Name, ID: "w"}}) {
				t.Errorf("the host was asked about %v, want this attachment alone", tc.host.asked[0])
			}
			if p.Hostports.NotOwn() != (tc.asked && slices.Contains(tc.omit, "portmap")) {
				t.Errorf("Hostports %+v: want NotOwn exactly when the host's answer left portmap out", p.Hostports)
			}
			if p.HostportsFirst != nil {
				t.Errorf("HostportsFirst = %+v: one network's prevention never runs portmap first", p.HostportsFirst)
			}
		})
	}
}

func TestAWholeWorkloadLeavingSeveralNetworksRunsPortmapsDELOnceFirst(t *testing.T) {
	both := []Attachment{{Network: "n1", ID: "w"}, {Network: "n2", ID: "w"}}
	cases := []struct {
		name   string
		detach Detach
		host   hostAnswer
		first  string   // the network portmap's DEL runs on first; "": none
		asked  []string // the networks the host was asked on
	}{
		{name: "a whole workload leaving several nftables-portmap networks, the host holding only their hostport rules: portmap's DEL runs first, on the first that hands it mappings",
			detach: Detach{Leaving: []Leaving{leaving(iptPortmapNet, true), leaving(nftPortmapNet, false), leaving(nftPortmapNet2, true)}},
			host:   hostAnswer{only: true}, first: "n2", asked: []string{"n2"}},
		{name: "the host holds another attachment's hostport rules of the id (another runtime's network): no DEL first",
			detach: Detach{Leaving: []Leaving{leaving(nftPortmapNet, true), leaving(nftPortmapNet2, true)}},
			host:   hostAnswer{only: false}, asked: []string{"n1"}},
		{name: "the hostport rules cannot be read: no DEL first",
			detach: Detach{Leaving: []Leaving{leaving(nftPortmapNet, true), leaving(nftPortmapNet2, true)}},
			host:   hostAnswer{only: true, err: errors.New("nftables cannot be read")}, asked: []string{"n1"}},
		{name: "the workload keeps other attachments: no DEL first, the host not asked",
			detach: Detach{Leaving: []Leaving{leaving(nftPortmapNet, true), leaving(nftPortmapNet2, true)}, Others: true},
			host:   hostAnswer{only: true}},
		{name: "one network leaving: no DEL first, the host not asked (its own DEL runs portmap)",
			detach: Detach{Leaving: []Leaving{leaving(nftPortmapNet, true)}},
			host:   hostAnswer{only: true}},
		{name: "no leaving network's DEL hands nftables portmap mappings: no DEL first, the host not asked",
			detach: Detach{Leaving: []Leaving{leaving(nftPortmapNet, false), leaving(iptPortmapNet, true)}},
			host:   hostAnswer{only: true}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var p Prevention
			tc.detach.hostportsFirst(&p, tc.host.reach)
			var first string
			if p.HostportsFirst != nil {
				first = p.HostportsFirst.Network.Name
			}
			if first != tc.first {
				t.Errorf("HostportsFirst on %q, want %q", first, tc.first)
			}
			if !slices.Equal(tc.host.first, tc.asked) {
				t.Errorf("the host was asked on %q, want %q", tc.host.first, tc.asked)
			}
			for _, atts := range tc.host.asked {
				if len(atts) != len(tc.detach.Leaving) || (len(atts) == 2 && !slices.Equal(atts, both)) {
					t.Errorf("the host was asked about %v, want every leaving attachment", atts)
				}
			}
			if p.Hostports.NotOwn() != (len(tc.asked) > 0 && tc.first == "") {
				t.Errorf("Hostports %+v: want NotOwn exactly when the host's answer kept portmap's DEL from running first", p.Hostports)
			}
		})
	}
}

func TestAPreventionsFilterSaysWhichPluginsOfTheChainTheDELRuns(t *testing.T) {
	chain := []string{"loopback", "bridge", "firewall", "portmap"}
	cases := []struct {
		name   string
		filter PluginFilter
		runs   []string
		apart  bool // runs on no libcni cache
	}{
		{"nothing left out: the whole chain, the network's own DEL", Prevention{}.Filter(), chain, false},
		{"portmap left out: the rest, still the network's own DEL", Prevention{Omit: []string{"portmap"}}.Filter(),
			[]string{"loopback", "bridge", "firewall"}, false},
		{"portmap and loopback left out", Prevention{Omit: []string{"portmap"}, OmitLoopback: true}.Filter(),
			[]string{"bridge", "firewall"}, false},
		{"portmap alone for a whole workload: apart from the network's own DEL, on no libcni cache", HostportsAlone,
			[]string{"portmap"}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runs := slices.DeleteFunc(slices.Clone(chain), func(typ string) bool { return !tc.filter.Runs(typ) })
			if !slices.Equal(runs, tc.runs) {
				t.Errorf("runs %q, want %q", runs, tc.runs)
			}
			if tc.filter.Apart() != tc.apart {
				t.Errorf("Apart = %v, want %v", tc.filter.Apart(), tc.apart)
			}
			if whole := len(tc.runs) == len(chain); tc.filter.Whole() != whole {
				t.Errorf("Whole = %v, want %v", tc.filter.Whole(), whole)
			}
		})
	}
}
