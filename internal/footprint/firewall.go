package footprint

import "net/netip"

// The firewall plugin (iptables backend) writes, per workload address, in
// table filter and without any comment:
//
//	-A CNI-FORWARD -d <ip>/<full> -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT
//	-A CNI-FORWARD -s <ip>/<full> -j ACCEPT
//
// Nothing in them names the network or the attachment, so they are
// deleted only for an address the evidence proves (see the package doc).

const firewallChain = "CNI-FORWARD"

// firewallRuleAddr returns the address of a rule exactly as the firewall
// plugin writes it for one workload address, and nothing else.
func firewallRuleAddr(r rule) (netip.Addr, bool) {
	if r.chain != firewallChain {
		return netip.Addr{}, false
	}
	var prefix string
	switch s := r.args(); {
	case len(s) == 8 && s[0] == "-d" && s[2] == "-m" && s[3] == "conntrack" && s[4] == "--ctstate" &&
		s[5] == "RELATED,ESTABLISHED" && s[6] == "-j" && s[7] == "ACCEPT":
		prefix = s[1]
	case len(s) == 4 && s[0] == "-s" && s[2] == "-j" && s[3] == "ACCEPT":
		prefix = s[1]
	default:
		return netip.Addr{}, false
	}
	return hostAddr(prefix)
}
