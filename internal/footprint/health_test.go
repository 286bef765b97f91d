package footprint_test

import (
	"context"
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// The captures in testdata/iptables: two attachments of network "nomad",
// alloc-1 (198.18.0.2, fd00:198:18::2; 8080→80 tcp and udp, 9090/tcp)
// and alloc-10 (198.18.0.3, fd00:198:18::3), written by the real plugins
// with the default bridge conflist.
const iptCaptures = "../../testdata/iptables"

// nomadConf is the default bridge conflist the captures were made with.
func nomadConf(ipamDir string) []footprint.Plugin {
	return []footprint.Plugin{
		{Type: "loopback", Bytes: []byte(`{"type":"loopback"}`)},
		{Type: "bridge", Bytes: []byte(`{"type":"bridge","bridge":"nomad","ipMasq":true,"ipam":{"type":"host-local","dataDir":"` + ipamDir + `"}}`)},
		{Type: "firewall", Bytes: []byte(`{"type":"firewall","backend":"iptables","iptablesAdminChainName":"NOMAD-ADMIN"}`)},
		{Type: "portmap", Bytes: []byte(`{"type":"portmap","capabilities":{"portMappings":true},"snat":true}`)},
	}
}

// capturedHost is a fake host holding the captures; saving wraps each
// family in the Saver extension (one iptables-save per family), else
// chains are listed one by one.
func capturedHost(t *testing.T, saving bool) (seams footprint.Seams, v4, v6 *fakes.IPTables) {
	t.Helper()
	v4, v6 = fakes.NewIPTables(), fakes.NewIPTables()
	for _, f := range []struct {
		ipt    *fakes.IPTables
		suffix string
	}{{v4, "ipv4"}, {v6, "ipv6"}} {
		for _, table := range []string{"nat", "filter"} {
			b, err := os.ReadFile(filepath.Join(iptCaptures, "dual-"+table+"-"+f.suffix+".txt"))
			if err != nil {
				t.Fatal(err)
			}
			f.ipt.Load(table, string(b))
		}
	}
	seams = footprint.Seams{
		IPTables: func(v6bool bool) (host.IPTables, error) {
			ipt := v4
			if v6bool {
				ipt = v6
			}
			if saving {
				return fakes.Saving{Batching: &fakes.Batching{IPTables: ipt}}, nil
			}
			return ipt, nil
		},
		NFTables: func() (host.NFTables, error) { return &fakes.NFTables{}, nil },
	}
	return seams, v4, v6
}

// alloc1 is the live attachment alloc-1 of the captures, its reservation
// and cached result written in dir.
func alloc1(t *testing.T, dir string) *footprint.Live {
	t.Helper()
	ipam := filepath.Join(dir, "ipam")
	l := &footprint.Live{
		Attachment: footprint.Attachment{Network: "nomad", ID: "alloc-1"},
		IfName:     "eth0",
		Net:        footprint.NetworkOf("nomad", nomadConf(ipam)),
		Backends:   map[string]string{"bridge": "iptables", "portmap": "iptables", "firewall": "iptables"},
		Result: &footprint.Result{
			Interfaces: []footprint.ResultInterface{{Name: "nomad"}, {Name: "veth1"}, {Name: "eth0", Sandbox: "/run/netns/w"}},
			IPs: []footprint.ResultIP{{Addr: netip.MustParsePrefix("198.18.0.2/24"), Interface: 2},
				{Addr: netip.MustParsePrefix("fd00:198:18::2/64"), Interface: 2}},
			Raw: []byte(`{"cniVersion":"1.0.0"}`),
		},
		Mappings: []footprint.PortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"},
			{HostPort: 8080, ContainerPort: 80, Protocol: "udp"}, {HostPort: 9090, ContainerPort: 9090, Protocol: "tcp"}},
	}
	l.Net.CacheDir = filepath.Join(dir, "cache")
	for _, addr := range []string{"198.18.0.2", "fd00:198:18::2"} {
		writeFile(t, filepath.Join(ipam, "nomad", addr), "alloc-1\r\neth0")
	}
	writeFile(t, filepath.Join(l.Net.CacheDir, "results", "nomad-alloc-1-eth0"), `{"kind":"cniCacheV1"}`)
	return l
}

func writeFile(t testing.TB, path, body string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// missing names what a check found missing, one "plugin: piece" each.
func missing(h footprint.Health) []string {
	var out []string
	for _, m := range h.Missing {
		out = append(out, m.Plugin+": "+m.String())
	}
	return out
}

func TestCheckNamesEachMissingPieceOfALiveAttachment(t *testing.T) {
	const (
		masqChain = "CNI-9142979c1d97ca631090d042"
		dnChain   = "CNI-DN-9142979c1d97ca631090d"
	)
	cases := []struct {
		name  string
		drift func(t *testing.T, v4, v6 *fakes.IPTables, l *footprint.Live)
		want  []string // substrings, one per missing piece, in order
	}{
		{name: "an attachment the plugins wrote whole misses nothing",
			drift: func(*testing.T, *fakes.IPTables, *fakes.IPTables, *footprint.Live) {}},
		{name: "its DNAT jumps deleted are portmap's, one per protocol",
			drift: func(t *testing.T, v4, _ *fakes.IPTables, _ *footprint.Live) {
				for _, r := range v4.Rules("nat", "CNI-HOSTPORT-DNAT") {
					if strings.Contains(r, `id: \"alloc-1\"`) {
						v4.Unload("nat", r)
					}
				}
			},
			want: []string{"portmap: iptables iptables rule nat CNI-HOSTPORT-DNAT: jump of tcp ports 8080,9090 to " + dnChain,
				"portmap: iptables iptables rule nat CNI-HOSTPORT-DNAT: jump of udp ports 8080 to " + dnChain}},
		{name: "its masquerade jump deleted is the bridge's, and the neighbour's does not stand for it",
			drift: func(t *testing.T, v4, _ *fakes.IPTables, _ *footprint.Live) {
				v4.Unload("nat", `-A POSTROUTING -s 198.18.0.2/32 -m comment --comment "name: \"nomad\" id: \"alloc-1\"" -j `+masqChain)
			},
			want: []string{"bridge: iptables iptables rule nat POSTROUTING: jump from 198.18.0.2 to " + masqChain}},
		{name: "its forward rules deleted are the firewall's",
			drift: func(t *testing.T, v4, _ *fakes.IPTables, _ *footprint.Live) {
				v4.Unload("filter", "-A CNI-FORWARD -d 198.18.0.2/32 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n-A CNI-FORWARD -s 198.18.0.2/32 -j ACCEPT")
			},
			want: []string{"firewall: iptables iptables rule filter CNI-FORWARD: accept replies to 198.18.0.2",
				"firewall: iptables iptables rule filter CNI-FORWARD: accept from 198.18.0.2"}},
		{name: "one DNAT rule of its chain deleted is named by its mapping",
			drift: func(t *testing.T, v4, _ *fakes.IPTables, _ *footprint.Live) {
				v4.Unload("nat", "-A "+dnChain+" -p udp -m udp --dport 8080 -j DNAT --to-destination 198.18.0.2:80")
			},
			want: []string{"portmap: iptables iptables rule nat " + dnChain + ": DNAT of udp/8080 to 198.18.0.2:80"}},
		{name: "ip6tables' filter table flushed and its chains deleted misses the IPv6 half",
			drift: func(t *testing.T, _, v6 *fakes.IPTables, _ *footprint.Live) {
				for _, r := range v6.Rules("filter", "FORWARD") {
					v6.Unload("filter", r)
				}
				for _, ch := range []string{"CNI-FORWARD", "NOMAD-ADMIN"} {
					if err := v6.ClearAndDeleteChain("filter", ch); err != nil {
						t.Fatal(err)
					}
				}
			},
			want: []string{"firewall: ip6tables iptables chain filter CNI-FORWARD", "firewall: ip6tables iptables chain filter NOMAD-ADMIN",
				"firewall: ip6tables iptables rule filter FORWARD: jump to CNI-FORWARD",
				"firewall: ip6tables iptables rule filter CNI-FORWARD: jump to NOMAD-ADMIN",
				"firewall: ip6tables iptables rule filter CNI-FORWARD: accept replies to fd00:198:18::2",
				"firewall: ip6tables iptables rule filter CNI-FORWARD: accept from fd00:198:18::2"}},
		{name: "its reservation deleted is host-local's, restored by cninet",
			drift: func(t *testing.T, _, _ *fakes.IPTables, l *footprint.Live) {
				if err := os.Remove(filepath.Join(l.Net.IPAMDirs[0], "198.18.0.2")); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"host-local: files ip reservation ", "/nomad/198.18.0.2"}},
		{name: "its reservation naming another holder cannot be restored in place",
			drift: func(t *testing.T, _, _ *fakes.IPTables, l *footprint.Live) {
				writeFile(t, filepath.Join(l.Net.IPAMDirs[0], "198.18.0.2"), "alloc-2\r\neth0")
			},
			want: []string{"(host-local reserved 198.18.0.2 for alloc-2 since)"}},
		{name: "its cached result deleted is libcni's",
			drift: func(t *testing.T, _, _ *fakes.IPTables, l *footprint.Live) {
				if err := os.Remove(filepath.Join(l.Net.CacheDir, "results", "nomad-alloc-1-eth0")); err != nil {
					t.Fatal(err)
				}
			},
			want: []string{"libcni: files cached result ", "/results/nomad-alloc-1-eth0"}},
	}
	for _, saving := range []bool{false, true} {
		for _, tc := range cases {
			t.Run(map[bool]string{false: "chain by chain", true: "iptables-save"}[saving]+"/"+tc.name, func(t *testing.T) {
				seams, v4, v6 := capturedHost(t, saving)
				l := alloc1(t, t.TempDir())
				tc.drift(t, v4, v6, l)
				h := footprint.NewChecker(context.Background(), seams).Check([]*footprint.Live{l})[0]
				got := missing(h)
				if h.Err != nil && !strings.Contains(h.Err.Error(), "host.LinkInspector") {
					t.Fatalf("check incomplete: %v", h.Err)
				}
				if len(tc.want) == 0 && len(got) > 0 {
					t.Fatalf("missing %q, want nothing", got)
				}
				joined := strings.Join(got, "\n")
				for _, w := range tc.want {
					if !strings.Contains(joined, w) {
						t.Errorf("missing:\n%s\nwant a piece naming %q", joined, w)
					}
				}
				if pieces := len(tc.want); pieces > 0 && !strings.HasPrefix(tc.want[len(tc.want)-1], "/") && len(got) != pieces {
					t.Errorf("%d pieces missing, want %d:\n%s", len(got), pieces, joined)
				}
			})
		}
	}
}

func TestOneReadOfTheHostServesEveryAttachmentChecked(t *testing.T) {
	seams, v4, v6 := capturedHost(t, true)
	saves := 0
	inner := seams.IPTables
	seams.IPTables = func(v6 bool) (host.IPTables, error) {
		saves++ // opened once per family per check: the listing is shared
		return inner(v6)
	}
	lives := make([]*footprint.Live, 20)
	for i := range lives {
		lives[i] = alloc1(t, t.TempDir())
	}
	health := footprint.NewChecker(context.Background(), seams).Check(lives)
	for _, h := range health {
		if len(h.Missing) > 0 {
			t.Fatalf("missing %q", missing(h))
		}
	}
	if saves != 2 {
		t.Fatalf("iptables opened %d times for 20 attachments, want once per family", saves)
	}
	if n := v4.Count("SaveAll") + v6.Count("SaveAll"); n > 2 {
		t.Fatalf("%d iptables-saves for 20 attachments, want one per family", n)
	}
}

// The bandwidth plugin takes its rates from its configuration when that
// names any, else from the bandwidth capability, which libcni hands only
// to a plugin that declares it: an ifb is expected only where it made
// one, for egress.
func TestTheBandwidthPluginsIfbIsExpectedWhereItShapesEgress(t *testing.T) {
	links := &fakes.Links{}
	links.AddIn("/run/netns/w", host.LinkInfo{Name: "eth0", Addrs: []netip.Prefix{netip.MustParsePrefix("198.18.0.2/24")}})
	seams := footprint.Seams{Links: func() (host.Links, error) { return links, nil }}
	egressCap := map[string]json.RawMessage{"bandwidth": json.RawMessage(`{"egressRate":1000000,"egressBurst":100000}`)}
	cases := []struct {
		name string
		conf string
		caps map[string]json.RawMessage
		want bool
	}{
		{"the capability not declared: no ifb", `{"type":"bandwidth"}`, egressCap, false},
		{"the configuration's own ingress rates win over the capability's egress: no ifb",
			`{"type":"bandwidth","capabilities":{"bandwidth":true},"ingressRate":1000,"ingressBurst":1000}`, egressCap, false},
		{"the declared capability's egress: an ifb", `{"type":"bandwidth","capabilities":{"bandwidth":true}}`, egressCap, true},
		{"the configuration's egress: an ifb", `{"type":"bandwidth","egressRate":1000,"egressBurst":1000}`, nil, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := &footprint.Live{
				Attachment: footprint.Attachment{Network: "n", ID: "w1"}, IfName: "eth0", NetNS: "/run/netns/w",
				Net:          footprint.NetworkOf("n", []footprint.Plugin{{Type: "bandwidth", Bytes: []byte(tc.conf)}}),
				Capabilities: tc.caps, Uncached: true,
				Result: &footprint.Result{Interfaces: []footprint.ResultInterface{{Name: "eth0", Sandbox: "/run/netns/w"}},
					IPs: []footprint.ResultIP{{Addr: netip.MustParsePrefix("198.18.0.2/24"), Interface: 0}}, Raw: []byte(`{}`)},
			}
			h := footprint.NewChecker(context.Background(), seams).Check([]*footprint.Live{l})[0]
			got := strings.Contains(strings.Join(missing(h), "\n"), "ifb bwp")
			if got != tc.want {
				t.Fatalf("ifb expected: %v, want %v (missing %q)", got, tc.want, missing(h))
			}
		})
	}
}

// libcni hands the port mappings only to a portmap that declares the
// portMappings capability: one that does not was given none and wrote
// nothing, so nothing of it is expected.
func TestAPortmapThatDeclaresNoPortMappingsIsExpectedToHaveWrittenNothing(t *testing.T) {
	seams, v4, _ := capturedHost(t, true)
	l := alloc1(t, t.TempDir())
	for i, p := range l.Net.Plugins {
		if p.Type == "portmap" {
			l.Net.Plugins[i].Bytes = []byte(`{"type":"portmap","snat":true}`)
		}
	}
	for _, r := range v4.Rules("nat", "CNI-HOSTPORT-DNAT") {
		v4.Unload("nat", r)
	}
	h := footprint.NewChecker(context.Background(), seams).Check([]*footprint.Live{l})[0]
	if got := missing(h); len(got) > 0 {
		t.Fatalf("missing %q of a portmap that was given no mappings", got)
	}
}

// With masqAll, portmap releases that know it mark hairpin traffic from
// any source (iptables lists it without -s) and write no localhost mark;
// older ones (Debian's 1.1.1) ignore it and write what they always do.
// Either is whole.
func TestPortmapsMasqAllMarksAreWholeAsEitherReleaseWritesThem(t *testing.T) {
	const dn = "CNI-DN-9142979c1d97ca631090d"
	for _, knows := range []bool{false, true} {
		t.Run(map[bool]string{false: "a release that ignores masqAll", true: "a release that knows masqAll"}[knows], func(t *testing.T) {
			seams, v4, v6 := capturedHost(t, true)
			l := alloc1(t, t.TempDir())
			for i, p := range l.Net.Plugins {
				if p.Type == "portmap" {
					l.Net.Plugins[i].Bytes = []byte(`{"type":"portmap","capabilities":{"portMappings":true},"snat":true,"masqAll":true}`)
				}
			}
			if knows {
				for _, ipt := range []*fakes.IPTables{v4, v6} {
					for _, r := range ipt.Rules("nat", dn) {
						if !strings.Contains(r, "-j CNI-HOSTPORT-SETMARK") {
							continue
						}
						ipt.Unload("nat", r)
						if !strings.Contains(r, "-s 127.0.0.1/32") {
							f := strings.Fields(r)
							ipt.Load("nat", strings.Join(append(f[:2:2], f[4:]...), " ")) // the same mark, from any source
						}
					}
				}
			}
			h := footprint.NewChecker(context.Background(), seams).Check([]*footprint.Live{l})[0]
			if got := missing(h); len(got) > 0 {
				t.Fatalf("missing %q", got)
			}
		})
	}
}

// portmap's nftables backend enters its chains through hostports_all
// since 1.9 and straight from prerouting and output before (1.6.1 to
// 1.8, with a host IP's DNAT in hostip_hostports): either layout is
// whole, and one rule of a mapping's missing is named by its protocol.
func TestPortmapsNFTablesRulesAreWholeInEitherReleasesLayout(t *testing.T) {
	ip := netip.MustParseAddr("198.18.0.2")
	lo := netip.MustParseAddr("127.0.0.1")
	hostIP := netip.MustParseAddr("198.18.9.9")
	rule := func(chain string, r host.NFTRule) host.NFTRule {
		r.Family, r.Table, r.Chain = "ip", "cni_hostport", chain
		return r
	}
	own := []host.NFTRule{
		rule("masquerading", host.NFTRule{Comment: "alloc-1", Saddr: ip, Daddr: ip}),
		rule("masquerading", host.NFTRule{Comment: "alloc-1", Saddr: lo, Daddr: ip}),
	}
	dnat := func(chain, proto string, daddr netip.Addr) host.NFTRule {
		return rule(chain, host.NFTRule{Comment: "alloc-1", L4Proto: proto, DPort: 8080, DNAT: ip, DNATPort: 80, Daddr: daddr})
	}
	layouts := map[string][]host.NFTRule{
		"since 1.9": append([]host.NFTRule{
			rule("prerouting", host.NFTRule{Verdict: "jump", Target: "hostports_all"}), rule("output", host.NFTRule{Verdict: "jump", Target: "hostports_all"}),
			rule("hostports_all", host.NFTRule{Verdict: "jump", Target: "hostip_hostports"}), rule("hostports_all", host.NFTRule{Verdict: "jump", Target: "hostports"}),
			dnat("hostports", "tcp", netip.Addr{}), dnat("hostports", "udp", netip.Addr{}), dnat("hostports", "tcp", hostIP)}, own...),
		"1.6.1 to 1.8": append([]host.NFTRule{
			rule("prerouting", host.NFTRule{Verdict: "jump", Target: "hostip_hostports"}), rule("prerouting", host.NFTRule{Verdict: "jump", Target: "hostports"}),
			rule("output", host.NFTRule{Verdict: "jump", Target: "hostip_hostports"}), rule("output", host.NFTRule{Verdict: "jump", Target: "hostports"}),
			dnat("hostports", "tcp", netip.Addr{}), dnat("hostports", "udp", netip.Addr{}), dnat("hostip_hostports", "tcp", hostIP)}, own...),
	}
	for name, rules := range layouts {
		t.Run(name, func(t *testing.T) {
			for _, drop := range []string{"", "udp"} {
				nft := &fakes.NFTables{}
				for _, r := range rules {
					if drop == "" || r.L4Proto != drop {
						nft.Add(r)
					}
				}
				l := &footprint.Live{
					Attachment: footprint.Attachment{Network: "n", ID: "alloc-1"}, IfName: "eth0", Uncached: true,
					Net: footprint.NetworkOf("n", []footprint.Plugin{{Type: "portmap",
						Bytes: []byte(`{"type":"portmap","backend":"nftables","capabilities":{"portMappings":true},"snat":true}`)}}),
					Backends: map[string]string{"portmap": "nftables"},
					Result: &footprint.Result{Interfaces: []footprint.ResultInterface{{Name: "eth0", Sandbox: "/run/netns/w"}},
						IPs: []footprint.ResultIP{{Addr: netip.MustParsePrefix("198.18.0.2/24"), Interface: 0}}, Raw: []byte(`{}`)},
					Mappings: []footprint.PortMapping{{HostPort: 8080, ContainerPort: 80, Protocol: "tcp"}, {HostPort: 8080, ContainerPort: 80, Protocol: "udp"},
						{HostPort: 8080, ContainerPort: 80, Protocol: "tcp", HostIP: hostIP.String()}},
				}
				seams := footprint.Seams{NFTables: func() (host.NFTables, error) { return nft, nil }}
				got := missing(footprint.NewChecker(context.Background(), seams).Check([]*footprint.Live{l})[0])
				switch {
				case drop == "" && len(got) > 0:
					t.Fatalf("missing %q of a whole attachment", got)
				case drop != "" && (len(got) != 1 || !strings.Contains(got[0], "udp dport 8080")):
					t.Fatalf("with its udp rule deleted, missing %q; want that rule alone", got)
				}
			}
		})
	}
}

// portmap maps what it was given: the runtime's port mappings where its
// configuration declares the portMappings capability (libcni passes
// them as its runtimeConfig), else its configuration's own
// runtimeConfig. alloc-1's captured rules map 8080 (tcp and udp) and
// 9090/tcp; the runtime here asked for 7070, which reaches portmap only
// through the capability.
func TestPortmapIsExpectedToMapWhatItWasGiven(t *testing.T) {
	const captured = `[{"hostPort":8080,"containerPort":80,"protocol":"tcp"},{"hostPort":8080,"containerPort":80,"protocol":"udp"},` +
		`{"hostPort":9090,"containerPort":9090,"protocol":"tcp"}]`
	cases := []struct {
		name, portmap string
		want          []string // substrings, one per missing piece
	}{
		{name: "with the capability, the runtime's mappings",
			portmap: `{"type":"portmap","capabilities":{"portMappings":true},"snat":true,"runtimeConfig":{"portMappings":` + captured + `}}`,
			want: []string{"iptables iptables rule nat CNI-HOSTPORT-DNAT: jump of tcp ports 7070 to", "hairpin mark of tcp/7070", "localhost mark of tcp/7070",
				"DNAT of tcp/7070 to 198.18.0.2:70", "ip6tables iptables rule nat CNI-HOSTPORT-DNAT: jump of tcp ports 7070 to",
				"ip6tables iptables rule nat CNI-DN-9142979c1d97ca631090d: hairpin mark of tcp/7070", "DNAT of tcp/7070 to [fd00:198:18::2]:70"}},
		{name: "without it, its runtimeConfig's",
			portmap: `{"type":"portmap","snat":true,"runtimeConfig":{"portMappings":` + captured + `}}`},
		{name: "without either, none",
			portmap: `{"type":"portmap","snat":true}`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			seams, _, _ := capturedHost(t, true)
			l := alloc1(t, t.TempDir())
			plugins := nomadConf(filepath.Dir(l.Net.IPAMDirs[0]))
			plugins[3].Bytes = []byte(tc.portmap)
			cacheDir := l.Net.CacheDir
			l.Net = footprint.NetworkOf("nomad", plugins)
			l.Net.CacheDir = cacheDir
			l.Mappings = []footprint.PortMapping{{HostPort: 7070, ContainerPort: 70, Protocol: "tcp"}}
			h := footprint.NewChecker(context.Background(), seams).Check([]*footprint.Live{l})[0]
			got := strings.Join(missing(h), "\n")
			if len(h.Missing) != len(tc.want) {
				t.Fatalf("missing:\n%s\nwant %d piece(s): %q", got, len(tc.want), tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("missing:\n%s\nwant a piece naming %q", got, w)
				}
			}
		})
	}
}
