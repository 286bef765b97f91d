package footprint

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/seed1280861d/cninet/internal/iptables"
)

// portmap with the iptables backend writes, per attachment and family, in
// table nat:
//
//	-A CNI-HOSTPORT-DNAT -m comment --comment "dnat name: \"N\" id: \"ID\"" ... -j CNI-DN-<h[:21]>
//	-N CNI-DN-<h[:21]>   (DNAT and mark rules, no comment)
//
// Releases before 0.7 used a CNI-SN-<h[:21]> chain as well. The shared
// chains (CNI-HOSTPORT-DNAT, -SETMARK, -MASQ) belong to every attachment
// and are never deleted. Everything here is found by name, so it proves
// no address and holds none.

type portmapIPT struct{}

const hostportDNATChain = "CNI-HOSTPORT-DNAT"

// The prefixes of portmap's per-attachment chains.
const (
	dnatChainPrefix = "CNI-DN-"
	snatChainPrefix = "CNI-SN-"
)

// DNATChain is portmap's per-attachment nat chain, CNI-DN-<h[:21]>
// (MustFormatChainNameWithPrefix(N, ID, "DN-") in the plugins' pkg/utils).
func (a Attachment) DNATChain() string { return a.chainName(dnatChainPrefix) }

// SNATChain is the per-attachment chain of portmap releases before 0.7.
func (a Attachment) SNATChain() string { return a.chainName(snatChainPrefix) }

// The views read CNI-HOSTPORT-DNAT for the DNAT jumps, rule by rule, in
// every run; a drift check also reads the built-in chains the shared
// chains hang from and the masquerade chains (expect) (iptReader).
func (portmapIPT) sharedChains() []tableChain { return []tableChain{{"nat", hostportDNATChain}} }
func (portmapIPT) checkedChains() []tableChain {
	return []tableChain{{"nat", "PREROUTING"}, {"nat", "OUTPUT"}, {"nat", postrouting},
		{"nat", hostportDNATChain}, {"nat", hostportSetMarkChain}, {"nat", hostportMasqChain}}
}
func (portmapIPT) chainPrefixes() []string { return []string{dnatChainPrefix, snatChainPrefix} }
func (portmapIPT) perFamily()              {}

// maxPortmapComment is where portmap cuts its comments (to 253 + "...").
const maxPortmapComment = 255

// DNATComment is portmap's comment, formatted (with %s, not %q) and cut
// exactly as the plugin does.
func (a Attachment) DNATComment() string {
	c := fmt.Sprintf(`dnat name: "%s" id: "%s"`, a.Network, a.ID)
	if len(c) > maxPortmapComment {
		c = c[:maxPortmapComment-2] + "..."
	}
	return c
}

// ownsDNATJump reports whether r is this attachment's CNI-HOSTPORT-DNAT
// jump.
func (a Attachment) ownsDNATJump(r iptables.Rule) bool {
	return r.Chain == hostportDNATChain && iptables.OwnsCommented(r, a.DNATComment(), a.DNATChain())
}

func (portmapIPT) prove(*view, attSet) []claim            { return nil }
func (portmapIPT) holders(*view, attSet, addrSet) []claim { return nil }

func (portmapIPT) plan(v *view, set attSet, _ *evidence, p *plan) {
	for _, f := range v.families() {
		if v.whole || f.anyChain("nat", chainsOf(set, Attachment.DNATChain)) {
			own := commentIndex(set, Attachment.DNATComment)
			rules, _ := f.rules("nat", hostportDNATChain)
			p.growIPT(f.v6, min(len(rules), len(set))+len(set)) // a jump and a chain each, at most
			for i := range rules {
				if a := ownerIn(rules[i], own[rules[i].Comment], Attachment.ownsDNATJump); a != nil {
					p.deleteRule(f.v6, *a, "nat", &rules[i])
				}
			}
		}
		for _, a := range set.sorted() {
			for _, ch := range []string{a.DNATChain(), a.SNATChain()} {
				if f.hasChain("nat", ch) {
					p.deleteChain(f.v6, a, "nat", ch)
				}
			}
		}
	}
}

func (portmapIPT) discover(v *view, found attSet) {
	for _, f := range v.families() {
		rules, _ := f.rules("nat", hostportDNATChain)
		for _, r := range rules {
			if a, ok := parseDNATComment(v, r.Comment); ok {
				found[a] = true
			}
		}
	}
}

// parseDNATComment returns the attachment of a known network an uncut
// portmap comment names.
func parseDNATComment(v *view, comment string) (Attachment, bool) {
	rest, ok := strings.CutPrefix(comment, `dnat name: "`)
	if !ok || !strings.HasSuffix(rest, `"`) {
		return Attachment{}, false
	}
	for _, name := range sortedKeys(v.nets) {
		if id, ok := strings.CutPrefix(rest, name+`" id: "`); ok {
			a := Attachment{name, strings.TrimSuffix(id, `"`)}
			if IsContainerID(a.ID) && a.DNATComment() == comment {
				return a, true
			}
		}
	}
	return Attachment{}, false
}

// The shared chains portmap hangs every attachment's rules from
// (genToplevelDnatChain, genSetMarkChain and genMarkMasqChain in the
// plugin).
const (
	hostportSetMarkChain = "CNI-HOSTPORT-SETMARK"
	hostportMasqChain    = "CNI-HOSTPORT-MASQ"
)

// portmapConf is what of portmap's configuration says which rules it
// writes; the defaults are the plugin's.
type portmapConf struct {
	SNAT                 *bool           `json:"snat"`
	MasqAll              bool            `json:"masqAll"`
	MarkMasqBit          *int            `json:"markMasqBit"`
	ExternalSetMarkChain *string         `json:"externalSetMarkChain"`
	ConditionsV4         []string        `json:"conditionsV4"`
	ConditionsV6         []string        `json:"conditionsV6"`
	Capabilities         map[string]bool `json:"capabilities"`
	RuntimeConfig        struct {
		PortMappings []PortMapping `json:"portMappings"`
	} `json:"runtimeConfig"`
	// given are the port mappings the plugin was given (portmapOf).
	given []PortMapping
}

// portmapOf returns the network's portmap configuration, with the
// plugin's defaults and the port mappings it was given: the runtime's
// (Live.Mappings) where it declares the portMappings capability — libcni
// then puts them in its runtimeConfig — else those its configuration's
// own runtimeConfig holds. ok is false when it runs no portmap.
func portmapOf(a *Live) (conf portmapConf, ok bool) {
	confs := configs[portmapConf](a.Net, "portmap")
	if len(confs) == 0 {
		return portmapConf{}, false
	}
	conf = confs[0]
	conf.given = conf.RuntimeConfig.PortMappings
	if conf.Capabilities["portMappings"] {
		conf.given = a.Mappings
	}
	if conf.SNAT == nil {
		snat := true
		conf.SNAT = &snat
	}
	if conf.MarkMasqBit == nil {
		bit := 13
		conf.MarkMasqBit = &bit
	}
	return conf, true
}

// setMarkChain is the chain the hairpin and localhost rules jump to.
func (c portmapConf) setMarkChain() string {
	if c.ExternalSetMarkChain != nil {
		return *c.ExternalSetMarkChain
	}
	return hostportSetMarkChain
}

// mappings returns the port mappings portmap applies to an address of
// family v6: those it was given without a host IP, or with one of the
// same family.
func (c portmapConf) mappings(v6 bool) []PortMapping {
	var out []PortMapping
	for _, m := range c.given {
		if m.HostIP != "" {
			if ip, err := netip.ParseAddr(m.HostIP); err == nil && ip.Is6() != v6 {
				continue
			}
		}
		out = append(out, m)
	}
	return out
}

// mark is the masquerade mark, as the plugin formats it.
func (c portmapConf) mark() string {
	m := 1 << uint(*c.MarkMasqBit&31)
	return fmt.Sprintf("%#x/%#x", m, m)
}

// expect: for each family the workload has an address of, the shared
// chains and their entry rules, the attachment's CNI-HOSTPORT-DNAT jumps
// (one per protocol and 15 ports), its CNI-DN chain, and in it, per
// mapping, the hairpin and localhost marks (with snat) and the DNAT rule
// — as forwardPorts writes them. portmap's own ADD restores them: it
// creates what is missing and adds each rule only when it is not there
// (pinned by the integration tests, for Debian's 1.1.1 and upstream's).
func (portmapIPT) expect(v *liveView, a *Live, h *Health) {
	if v.firewallUnchanged {
		return // nothing to compare: skip building what is wanted
	}
	conf, ok := portmapOf(a)
	if !ok || len(conf.given) == 0 || a.backend("portmap") == "nftables" {
		return
	}
	for _, v6 := range []bool{false, true} {
		addr, ok := a.sandboxAddr(v6)
		if !ok {
			continue
		}
		chains := []string{hostportDNATChain, a.DNATChain()}
		if *conf.SNAT && conf.ExternalSetMarkChain == nil {
			chains = append(chains, hostportSetMarkChain, hostportMasqChain)
		}
		expectChains(v, v6, "portmap", ByPlugin, h, "nat", chains...)
		expectRules(v, v6, "portmap", ByPlugin, h, portmapRules(a, conf, addr)...)
	}
}

// portmapRules are the rules forwardPorts writes for the workload address
// addr, shared ones first.
func portmapRules(a *Live, conf portmapConf, addr netip.Prefix) []wantRule {
	v6 := addr.Addr().Is6()
	out := []wantRule{
		rule("nat", "PREROUTING", "jump to "+hostportDNATChain, "-m", "addrtype", "--dst-type", "LOCAL", "-j", hostportDNATChain),
		rule("nat", "OUTPUT", "jump to "+hostportDNATChain, "-m", "addrtype", "--dst-type", "LOCAL", "-j", hostportDNATChain),
	}
	if *conf.SNAT && conf.ExternalSetMarkChain == nil {
		out = append(out,
			rule("nat", hostportSetMarkChain, "mark for masquerade", "-m", "comment", "--comment", "CNI portfwd masquerade mark", "-j", "MARK", "--set-xmark", conf.mark()),
			rule("nat", hostportMasqChain, "masquerade the marked", "-m", "mark", "--mark", conf.mark(), "-j", "MASQUERADE"),
			rule("nat", postrouting, "jump to "+hostportMasqChain, "-m", "comment", "--comment", "CNI portfwd requiring masquerade", "-j", hostportMasqChain).atHead())
	}
	var protos []string
	ports := map[string][]string{}
	for _, m := range conf.given { // the jumps name every mapping's port, of either family
		if _, ok := ports[m.Protocol]; !ok {
			protos = append(protos, m.Protocol)
		}
		ports[m.Protocol] = append(ports[m.Protocol], strconv.Itoa(m.HostPort))
	}
	slices.Sort(protos)
	chain, comment := a.DNATChain(), a.DNATComment()
	for _, proto := range protos {
		for group := range slices.Chunk(ports[proto], 15) {
			spec := strings.Join(group, ",")
			jump := rule("nat", hostportDNATChain, fmt.Sprintf("jump of %s ports %s to %s", proto, spec, chain),
				"-m", "comment", "--comment", comment, "-m", "multiport", "-p", proto, "--destination-ports", spec, "-j", chain)
			if len(conf.ConditionsV4) > 0 && !v6 || len(conf.ConditionsV6) > 0 && v6 {
				jump = jump.inexact() // the user's conditions come before -j, as they wrote them
			}
			out = append(out, jump)
		}
	}
	for _, m := range conf.mappings(v6) {
		base := []string{"-p", m.Protocol, "--dport", strconv.Itoa(m.HostPort)}
		what := fmt.Sprintf("%s/%d", m.Protocol, m.HostPort)
		if hostIP, err := netip.ParseAddr(m.HostIP); err == nil && !hostIP.IsUnspecified() {
			base = append(base, "-d", m.HostIP)
			what = m.HostIP + ":" + what
		}
		if *conf.SNAT {
			// With masqAll, releases that know it mark from any source
			// (which iptables lists without -s) and add no localhost
			// mark; older ones ignore it. Either way a mark rule of the
			// mapping is there, from some source.
			hairpin := rule("nat", chain, "hairpin mark of "+what, append(slices.Clip(base), "-s", addr.String(), "-j", conf.setMarkChain())...)
			if conf.MasqAll {
				hairpin = rule("nat", chain, "hairpin mark of "+what, append(slices.Clip(base), "-j", conf.setMarkChain())...).inexact()
			}
			out = append(out, hairpin.inOwnChain())
			if !v6 && !conf.MasqAll {
				out = append(out, rule("nat", chain, "localhost mark of "+what, append(slices.Clip(base), "-s", "127.0.0.1", "-j", conf.setMarkChain())...).inOwnChain())
			}
		}
		to := netip.AddrPortFrom(addr.Addr(), uint16(m.ContainerPort)).String()
		out = append(out, rule("nat", chain, "DNAT of "+what+" to "+to, append(slices.Clip(base), "-j", "DNAT", "--to-destination", to)...).inOwnChain())
	}
	return out
}
