package fakes

import (
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	cni "github.com/containerd/go-cni"
)

// Footprint is what the bridge (with ipMasq), portmap and firewall plugins
// leave in iptables for one address of one attachment, in their exact
// formats: the lines `iptables -S` prints. Load them into an IPTables to
// plant a leak; CNI writes them when it emulates the plugins.
type Footprint struct {
	Network, ID string
	// Addr is the attachment's address with its subnet's length, as a
	// CNI result gives it: 198.18.0.2/24.
	Addr netip.Prefix
	// Masquerade: the bridge plugin's ipMasq chain and the POSTROUTING
	// rule that jumps to it.
	Masquerade bool
	// Ports: portmap's DNAT chain and the CNI-HOSTPORT-DNAT rules that
	// jump to it, one per protocol.
	Ports []cni.PortMapping
	// Firewall: the firewall plugin's two CNI-FORWARD rules.
	Firewall bool
	// AdminChain is the firewall plugin's iptablesAdminChainName, which
	// CNI-FORWARD jumps to first ("": CNI-ADMIN).
	AdminChain string
}

// SharedNAT is what the bridge and portmap plugins share between
// attachments in the nat table: the first ADD creates it, no DEL removes
// it.
const SharedNAT = `-N CNI-HOSTPORT-DNAT
-N CNI-HOSTPORT-SETMARK
-N CNI-HOSTPORT-MASQ
-A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A OUTPUT -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT
-A POSTROUTING -m comment --comment "CNI portfwd requiring masquerade" -j CNI-HOSTPORT-MASQ
-A CNI-HOSTPORT-MASQ -m mark --mark 0x2000/0x2000 -j MASQUERADE
-A CNI-HOSTPORT-SETMARK -m comment --comment "CNI portfwd masquerade mark" -j MARK --set-xmark 0x2000/0x2000`

// SharedFilter is what the firewall plugin shares between attachments in
// the filter table, with its admin chain ("": CNI-ADMIN, the plugin's
// default).
func SharedFilter(adminChain string) string {
	if adminChain == "" {
		adminChain = "CNI-ADMIN"
	}
	return `-N CNI-FORWARD
-N ` + adminChain + `
-A FORWARD -m comment --comment "CNI firewall plugin rules" -j CNI-FORWARD
-A CNI-FORWARD -m comment --comment "CNI firewall plugin admin overrides" -j ` + adminChain
}

// IPv6 reports whether the footprint goes to ip6tables.
func (f Footprint) IPv6() bool { return f.Addr.Addr().Is6() }

// chainName is the plugins' chain name of (network, id): prefix and the
// hex SHA-512 of network+id, cut to 28 characters.
func chainName(prefix, network, id string) string {
	sum := sha512.Sum512([]byte(network + id))
	return (prefix + hex.EncodeToString(sum[:]))[:28]
}

// MasqChain is the bridge plugin's masquerade chain: CNI-<hash>.
func (f Footprint) MasqChain() string { return chainName("CNI-", f.Network, f.ID) }

// DNATChain is portmap's chain: CNI-DN-<hash>.
func (f Footprint) DNATChain() string { return chainName("CNI-DN-", f.Network, f.ID) }

// host is the address alone, as a /32 or /128.
func (f Footprint) host() string {
	return netip.PrefixFrom(f.Addr.Addr(), f.Addr.Addr().BitLen()).String()
}

// cut255 is what iptables stores of a comment: its first 255 bytes.
func cut255(s string) string {
	if len(s) > 255 {
		return s[:255]
	}
	return s
}

func (f Footprint) masqComment() string {
	return cut255(fmt.Sprintf("name: %q id: %q", f.Network, f.ID))
}

func (f Footprint) dnatComment() string {
	c := fmt.Sprintf(`dnat name: "%s" id: "%s"`, f.Network, f.ID)
	if len(c) > 255 {
		c = c[:253] + "..." // portmap's own cut
	}
	return cut255(c)
}

func rule(chain string, match string, spec ...string) string {
	if match != "" {
		match += " "
	}
	return "-A " + chain + " " + match + FormatRule(spec)
}

// NAT returns the footprint's chains and rules of the nat table.
func (f Footprint) NAT() string {
	var lines []string
	if f.Masquerade {
		masq, multicast := f.MasqChain(), "224.0.0.0/4"
		if f.IPv6() {
			multicast = "ff00::/8"
		}
		comment := []string{"-m", "comment", "--comment", f.masqComment()}
		lines = append(lines, "-N "+masq,
			rule("POSTROUTING", "-s "+f.host(), append(comment, "-j", masq)...),
			rule(masq, "-d "+f.Addr.Masked().String(), append(comment, "-j", "ACCEPT")...),
			rule(masq, "! -d "+multicast, append(comment, "-j", "MASQUERADE")...))
	}
	if len(f.Ports) > 0 {
		lines = append(lines, f.dnat()...)
	}
	return strings.Join(lines, "\n")
}

func (f Footprint) dnat() []string {
	dn := f.DNATChain()
	lines := []string{"-N " + dn}
	var protocols []string
	ports := map[string][]string{}
	to := f.Addr.Addr().String()
	if f.IPv6() {
		to = "[" + to + "]"
	}
	var chain []string
	for _, m := range f.Ports {
		proto := strings.ToLower(m.Protocol)
		if proto == "" {
			proto = "tcp"
		}
		if _, ok := ports[proto]; !ok {
			protocols = append(protocols, proto)
		}
		hostPort, containerPort := strconv.Itoa(int(m.HostPort)), strconv.Itoa(int(m.ContainerPort))
		ports[proto] = append(ports[proto], hostPort)
		match := "-p " + proto + " -m " + proto + " --dport " + hostPort
		chain = append(chain, "-A "+dn+" -s "+f.Addr.Masked().String()+" "+match+" -j CNI-HOSTPORT-SETMARK")
		if !f.IPv6() {
			chain = append(chain, "-A "+dn+" -s 127.0.0.1/32 "+match+" -j CNI-HOSTPORT-SETMARK")
		}
		chain = append(chain, "-A "+dn+" "+match+" -j DNAT --to-destination "+to+":"+containerPort)
	}
	for _, proto := range protocols {
		lines = append(lines, rule("CNI-HOSTPORT-DNAT", "-p "+proto,
			"-m", "comment", "--comment", f.dnatComment(), "-m", "multiport", "--dports", strings.Join(ports[proto], ","), "-j", dn))
	}
	return append(lines, chain...)
}

// Filter returns the footprint's rules of the filter table.
func (f Footprint) Filter() string {
	if !f.Firewall {
		return ""
	}
	return "-A CNI-FORWARD -d " + f.host() + " -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n" +
		"-A CNI-FORWARD -s " + f.host() + " -j ACCEPT"
}
