package fakes

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/seed1280861d/cninet/host"
)

// Host is a fake host: iptables and ip6tables, nftables and network
// devices, all in memory. Its methods IPTables, NFTables and Links have
// the types of cninet.Config's fields of those names, so a Config takes
// them as they are; its fields are there to plant state and to look.
type Host struct {
	IPv4, IPv6 *IPTables
	NFT        *NFTables
	Devices    *Links
}

// NewHost returns a host with only iptables' built-in chains, no
// nftables rule and no device.
func NewHost() *Host {
	return &Host{IPv4: NewIPTables(), IPv6: NewIPTables(), NFT: &NFTables{}, Devices: &Links{}}
}

// IPTables is Config.IPTables: the family's tables, with the base
// interface only, so cleanup lists and deletes chain by chain (wrap a
// table in Batching, Saving or NewProbing for the host's extensions).
func (h *Host) IPTables(ipv6 bool) (host.IPTables, error) { return h.Family(ipv6), nil }

// NFTables is Config.NFTables.
func (h *Host) NFTables() (host.NFTables, error) { return h.NFT, nil }

// Links is Config.Links.
func (h *Host) Links() (host.Links, error) { return h.Devices, nil }

// Family returns ip6tables' tables if ipv6, else iptables'.
func (h *Host) Family(ipv6 bool) *IPTables {
	if ipv6 {
		return h.IPv6
	}
	return h.IPv4
}

// Dump is the whole host as text, the same for the same state: each
// family's nat and filter tables as `iptables -S` prints them, the
// nftables rules, the devices. Compare two dumps to see what changed.
func (h *Host) Dump() string {
	var b strings.Builder
	for _, fam := range []struct {
		name string
		ipt  *IPTables
	}{{"iptables", h.IPv4}, {"ip6tables", h.IPv6}} {
		for _, table := range []string{"nat", "filter"} {
			fmt.Fprintf(&b, "# %s -t %s -S\n%s", fam.name, table, fam.ipt.Save(table))
		}
	}
	b.WriteString("# nft list ruleset\n")
	for _, r := range h.NFT.Rules() {
		fmt.Fprintf(&b, "%s\n", r)
	}
	b.WriteString("# ip link\n")
	for _, n := range h.Devices.Names() {
		fmt.Fprintf(&b, "%s\n", n)
	}
	return b.String()
}

// Leftovers returns the lines of fp still on the host, as `iptables -S`
// prints them: its chains ("-N …") and rules ("-A …"). None means the
// footprint is gone whole.
func (h *Host) Leftovers(fp Footprint) []string {
	ipt := h.Family(fp.IPv6())
	var left []string
	for _, t := range []struct{ table, lines string }{{"nat", fp.NAT()}, {"filter", fp.Filter()}} {
		for _, line := range strings.Split(t.lines, "\n") {
			f := strings.Fields(line)
			switch {
			case len(f) < 2:
			case f[0] == "-N" && ipt.HasChain(t.table, f[1]):
				left = append(left, line)
			case f[0] == "-A" && slices.Contains(ipt.Rules(t.table, f[1]), line):
				left = append(left, line)
			}
		}
	}
	return left
}

// plant writes fp and the shared chains it needs, as the plugins' ADD.
func (h *Host) plant(fp Footprint) {
	ipt := h.Family(fp.IPv6())
	if fp.Masquerade || len(fp.Ports) > 0 {
		if len(fp.Ports) > 0 {
			ipt.Ensure("nat", SharedNAT)
		}
		ipt.Load("nat", fp.NAT())
	}
	if fp.Firewall {
		ipt.Ensure("filter", SharedFilter(fp.AdminChain))
		ipt.Load("filter", fp.Filter())
	}
}

// plug makes the devices the bridge plugin's ADD makes: the network's
// bridge (none for "") and the workload's interface ifName in netns with
// addrs. The host's end of the veth is left out: the emulated result
// names no host interface. Tests may attach several ids to one
// namespace path, which the plugins would refuse: the interface then
// holds the addresses of each.
func (h *Host) plug(bridge, netns, ifName string, addrs []netip.Prefix) {
	if h.Devices == nil {
		return
	}
	if bridge != "" {
		h.Devices.AddLinks(host.LinkInfo{Name: bridge, Up: true})
	}
	h.Devices.addAddrs(netns, ifName, addrs)
}

// unplug takes addrs off the workload's interface, and the interface
// away with its last address, as the plugin's DEL deletes the veth; the
// bridge stays.
func (h *Host) unplug(netns, ifName string, addrs []netip.Prefix) {
	if h.Devices != nil {
		h.Devices.dropAddrs(netns, ifName, addrs)
	}
}

// uproot removes fp, as the plugins' DEL: the shared chains stay.
func (h *Host) uproot(fp Footprint) {
	h.Family(fp.IPv6()).Unload("nat", fp.NAT()).Unload("filter", fp.Filter())
}
