package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/nftables"
)

// fakeAttachment is one attachment whose footprint is written in bulk, in
// the plugins' exact formats (testdata/iptables, testdata/nftables), as
// if the real plugins had set it up: dual stack, one tcp port mapping to
// 8080, interface eth0.
type fakeAttachment struct {
	footprint.Attachment
	IP4, IP6         netip.Addr
	Subnet4, Subnet6 netip.Prefix
	Port             int
}

// fakeRange describes attachments first..last-1 of one network: ids
// prefix-00000…, addresses counted up from the subnets' base + 2.
type fakeRange struct {
	network, idPrefix string
	subnet4, subnet6  netip.Prefix
	port0             int
}

func (r fakeRange) at(i int) fakeAttachment {
	b4 := r.subnet4.Addr().As4()
	off := uint32(b4[0])<<24 | uint32(b4[1])<<16 | uint32(b4[2])<<8 | uint32(b4[3])
	off += uint32(i/250)<<8 | uint32(2+i%250) // .2-.251 of each /24: no network or broadcast address
	ip4 := netip.AddrFrom4([4]byte{byte(off >> 24), byte(off >> 16), byte(off >> 8), byte(off)})
	b6 := r.subnet6.Addr().As16()
	n := uint32(2 + i)
	b6[12], b6[13], b6[14], b6[15] = byte(n>>24), byte(n>>16), byte(n>>8), byte(n)
	return fakeAttachment{
		Attachment: footprint.Attachment{Network: r.network, ID: fmt.Sprintf("%s-%05d", r.idPrefix, i)},
		IP4:        ip4, IP6: netip.AddrFrom16(b6),
		Subnet4: r.subnet4, Subnet6: r.subnet6,
		Port: r.port0 + i%20000,
	}
}

// iptQuote quotes an iptables-restore argument.
func iptQuote(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` }

// writeIPTables writes the attachment's iptables rules for one family,
// as the bridge (masquerade), portmap (DNAT, snat) and firewall plugins do.
func (a fakeAttachment) writeIPTables(nat, filter *bytes.Buffer, v6 bool) {
	ip, full, multicast, subnet := a.IP4, "/32", "224.0.0.0/4", a.Subnet4
	dest := ip.String()
	if v6 {
		ip, full, multicast, subnet = a.IP6, "/128", "ff00::/8", a.Subnet6
		dest = "[" + ip.String() + "]"
	}
	masq, dn := a.MasqChain(), a.DNATChain()
	comment, dnat := iptQuote(a.MasqComment()), iptQuote(a.DNATComment())
	fmt.Fprintf(nat, ":%s - [0:0]\n:%s - [0:0]\n", masq, dn)
	fmt.Fprintf(nat, "-A POSTROUTING -s %s%s -m comment --comment %s -j %s\n", ip, full, comment, masq)
	fmt.Fprintf(nat, "-A %s -d %s -m comment --comment %s -j ACCEPT\n", masq, subnet, comment)
	fmt.Fprintf(nat, "-A %s ! -d %s -m comment --comment %s -j MASQUERADE\n", masq, multicast, comment)
	fmt.Fprintf(nat, "-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment %s -m multiport --dports %d -j %s\n", dnat, a.Port, dn)
	fmt.Fprintf(nat, "-A %s -s %s -p tcp -m tcp --dport %d -j CNI-HOSTPORT-SETMARK\n", dn, subnet, a.Port)
	if !v6 {
		fmt.Fprintf(nat, "-A %s -s 127.0.0.1/32 -p tcp -m tcp --dport %d -j CNI-HOSTPORT-SETMARK\n", dn, a.Port)
	}
	fmt.Fprintf(nat, "-A %s -p tcp -m tcp --dport %d -j DNAT --to-destination %s:8080\n", dn, a.Port, dest)
	fmt.Fprintf(filter, "-A CNI-FORWARD -d %s%s -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n", ip, full)
	fmt.Fprintf(filter, "-A CNI-FORWARD -s %s%s -j ACCEPT\n", ip, full)
}

// iptRuleCount is the rules and chains writeIPTables writes per attachment
// (both families).
const iptRuleCount = 2*(2+3+1+2+2) + 1

// writeNFTables writes the attachment's rules in the nftables backends:
// bridge masquerade (inet cni_plugins_masquerade masq_checks) and portmap
// DNAT and masquerading (ip and ip6 cni_hostport), `nft -f` syntax.
func (a fakeAttachment) writeNFTables(b *bytes.Buffer) {
	masq := a.NFTMasqComment("eth0")
	fmt.Fprintf(b, "add rule inet cni_plugins_masquerade masq_checks ip saddr %s ip daddr != %s masquerade comment %q\n", a.IP4, a.Subnet4, masq)
	fmt.Fprintf(b, "add rule inet cni_plugins_masquerade masq_checks ip6 saddr %s ip6 daddr != %s masquerade comment %q\n", a.IP6, a.Subnet6, masq)
	fmt.Fprintf(b, "add rule ip cni_hostport hostports tcp dport %d dnat to %s:8080 comment %q\n", a.Port, a.IP4, a.ID)
	fmt.Fprintf(b, "add rule ip6 cni_hostport hostports tcp dport %d dnat to [%s]:8080 comment %q\n", a.Port, a.IP6, a.ID)
	fmt.Fprintf(b, "add rule ip cni_hostport masquerading ip saddr %s ip daddr %s masquerade comment %q\n", a.IP4, a.IP4, a.ID)
	fmt.Fprintf(b, "add rule ip cni_hostport masquerading ip saddr 127.0.0.1 ip daddr %s masquerade comment %q\n", a.IP4, a.ID)
	fmt.Fprintf(b, "add rule ip6 cni_hostport masquerading ip6 saddr %s ip6 daddr %s masquerade comment %q\n", a.IP6, a.IP6, a.ID)
}

// nftRuleCount is the rules writeNFTables writes per attachment.
const nftRuleCount = 7

// nftDeclarations declares the plugins' tables and the chains the rules go
// to exactly as the plugins do (knftables' `add`, a no-op where they exist
// already), so a plugin run later finds them as its own.
const nftDeclarations = `add table inet cni_plugins_masquerade { comment "Masquerading for plugins from github.com/containernetworking/plugins" ; }
add chain inet cni_plugins_masquerade masq_checks { comment "Masquerade traffic from certain IPs to any (non-multicast) IP outside their subnet" ; }
add table ip cni_hostport { comment "CNI portmap plugin" ; }
add chain ip cni_hostport hostports
add chain ip cni_hostport hostip_hostports
add chain ip cni_hostport masquerading { type nat hook postrouting priority srcnat ; }
add table ip6 cni_hostport { comment "CNI portmap plugin" ; }
add chain ip6 cni_hostport hostports
add chain ip6 cni_hostport hostip_hostports
add chain ip6 cni_hostport masquerading { type nat hook postrouting priority srcnat ; }
`

// reserve writes the attachment's host-local reservations in
// <dataDir>/<network>/, as host-local does ("ID\r\nIFNAME").
func (a fakeAttachment) reserve(dataDir string) error {
	dir := filepath.Join(dataDir, a.Network)
	for _, ip := range []netip.Addr{a.IP4, a.IP6} {
		if err := os.WriteFile(filepath.Join(dir, ip.String()), []byte(a.ID+"\r\neth0"), 0o600); err != nil {
			return err
		}
	}
	return nil
}

// writeFootprints writes the footprints of attachments first..last-1 of r:
// iptables (iptables-restore --noflush, one run per table and family)
// when ipt, nftables (one `nft -f -`) when nft, and always the
// reservations in /run/cni.
func writeFootprints(r fakeRange, first, last int, ipt, nft bool) error {
	if err := os.MkdirAll(filepath.Join("/run/cni", r.network), 0o755); err != nil {
		return err
	}
	var nat4, nat6, filter4, filter6, nftScript bytes.Buffer
	nftScript.WriteString(nftDeclarations)
	for i := first; i < last; i++ {
		a := r.at(i)
		if ipt {
			a.writeIPTables(&nat4, &filter4, false)
			a.writeIPTables(&nat6, &filter6, true)
		}
		if nft {
			a.writeNFTables(&nftScript)
		}
		if err := a.reserve("/run/cni"); err != nil {
			return err
		}
	}
	if ipt && last > first {
		for _, fam := range []struct {
			v6          bool
			nat, filter *bytes.Buffer
		}{{false, &nat4, &filter4}, {true, &nat6, &filter6}} {
			if err := iptRestore(fam.v6, "nat", fam.nat, "CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-SETMARK"); err != nil {
				return err
			}
			if err := iptRestore(fam.v6, "filter", fam.filter, "CNI-FORWARD"); err != nil {
				return err
			}
		}
	}
	if nft && last > first {
		cmd := exec.Command("nft", "-f", "-")
		cmd.Stdin = &nftScript
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("nft -f: %v: %s", err, firstLines(string(out), 5))
		}
	}
	return nil
}

// iptRestore appends body to table with iptables-restore --noflush. The
// shared chains are created first when missing, and not declared in the
// input: declaring an existing chain would flush it, and with it the
// plugins' own rules there.
func iptRestore(v6 bool, table string, body *bytes.Buffer, shared ...string) error {
	ipt, restore := "iptables", "iptables-restore"
	if v6 {
		ipt, restore = "ip6tables", "ip6tables-restore"
	}
	for _, chain := range shared {
		if exec.Command(ipt, "-w", "-t", table, "-S", chain).Run() != nil {
			if out, err := exec.Command(ipt, "-w", "-t", table, "-N", chain).CombinedOutput(); err != nil {
				return fmt.Errorf("%s -N %s: %v: %s", ipt, chain, err, out)
			}
		}
	}
	var in bytes.Buffer
	fmt.Fprintf(&in, "*%s\n", table)
	in.Write(body.Bytes())
	in.WriteString("COMMIT\n")
	cmd := exec.Command(restore, "-w", "--noflush")
	cmd.Stdin = &in
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("%s: %v: %s", restore, err, firstLines(string(out), 5))
	}
	return nil
}

func firstLines(s string, n int) string {
	lines := strings.SplitN(s, "\n", n+1)
	return strings.Join(lines[:min(n, len(lines))], "\n")
}

// leftOf counts what is left of attachments first..last-1 of r: iptables
// rules and chains naming the network, firewall rules of their addresses,
// nftables rules whose comment names them (parsed from `nft -j list
// ruleset` with nftables.ParseListing), and reservation files.
func leftOf(r fakeRange, first, last int) (iptLeft, nftLeft, files int, err error) {
	addrs := map[string]bool{}
	ids := map[string]bool{}
	masq := map[string]bool{}
	chains := map[string]bool{}
	for i := first; i < last; i++ {
		a := r.at(i)
		addrs[a.IP4.String()], addrs[a.IP6.String()] = true, true
		ids[a.ID], masq[a.NFTMasqComment("eth0")] = true, true
		chains[a.MasqChain()], chains[a.DNATChain()] = true, true
	}
	for _, cmd := range []string{"iptables-save", "ip6tables-save"} {
		out, err := exec.Command(cmd).Output()
		if err != nil {
			return 0, 0, 0, fmt.Errorf("%s: %w", cmd, err)
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, `\"`+r.network+`\"`) {
				iptLeft++
				continue
			}
			if decl, ok := strings.CutPrefix(line, ":"); ok && chains[strings.SplitN(decl, " ", 2)[0]] {
				iptLeft++
				continue
			}
			if f := strings.Fields(line); len(f) > 3 && f[0] == "-A" && f[1] == "CNI-FORWARD" && (f[2] == "-s" || f[2] == "-d") {
				if p, err := netip.ParsePrefix(f[3]); err == nil && addrs[p.Addr().String()] {
					iptLeft++
				}
			}
		}
	}
	if nftLeft, err = nftCommented(func(r host.NFTRule) bool { return ids[r.Comment] || masq[r.Comment] }); err != nil {
		return 0, 0, 0, err
	}
	entries, _ := os.ReadDir(filepath.Join("/run/cni", r.network))
	for _, e := range entries {
		if _, err := netip.ParseAddr(e.Name()); err == nil {
			files++
		}
	}
	return iptLeft, nftLeft, files, nil
}

// nftCommented counts the rules with a comment in the plugins' tables
// (inet cni_plugins_masquerade, ip and ip6 cni_hostport) that match.
func nftCommented(match func(host.NFTRule) bool) (int, error) {
	if _, err := exec.LookPath("nft"); err != nil {
		return 0, nil
	}
	out, err := exec.Command("nft", "-j", "list", "ruleset").Output()
	if err != nil {
		return 0, fmt.Errorf("nft -j list ruleset: %w", err)
	}
	rules, err := nftables.ParseListing(out)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, r := range rules {
		inTables := (r.Family == "inet" && r.Table == "cni_plugins_masquerade") || ((r.Family == "ip" || r.Family == "ip6") && r.Table == "cni_hostport")
		if inTables && r.Comment != "" && match(r) {
			n++
		}
	}
	return n, nil
}

// nftRuleTotal counts every rule in the ruleset, to say how big it is.
func nftRuleTotal() int {
	out, err := exec.Command("nft", "-j", "list", "ruleset").Output()
	if err != nil {
		return 0
	}
	var doc struct {
		Objects []map[string]json.RawMessage `json:"nftables"`
	}
	if json.Unmarshal(out, &doc) != nil {
		return 0
	}
	n := 0
	for _, o := range doc.Objects {
		if _, ok := o["rule"]; ok {
			n++
		}
	}
	return n
}
