package footprint

import "net/netip"

// portmap with "backend": "nftables" writes, per attachment, in tables
// ip cni_hostport and ip6 cni_hostport (one per address family the
// attachment has):
//
//	chain hostports:    tcp dport <host port> dnat to <ip>:<port>      comment "ID"
//	                    (with ip[6] daddr <host ip> in front for a host IP)
//	chain masquerading: ip saddr <ip> ip daddr <ip> masquerade        comment "ID"
//	                    ip saddr 127.0.0.1 ip daddr <ip> masquerade  comment "ID"
//
// Chain hostip_hostports is kept (empty) for upgrades and scanned too. The
// comment is the bare container id, of whatever network: a rule is the
// attachment's only when its workload address is one this attachment
// provably held and nobody else holds now. The tables and chains are
// shared and never deleted.

var nftHostportTables = [2]NFTable{{Family: "ip", Name: "cni_hostport"}, {Family: "ip6", Name: "cni_hostport"}}

var nftHostportChains = map[string]bool{"hostports": true, "hostip_hostports": true, "masquerading": true}

// nftHostportAddr returns the workload address of one of portmap's
// per-attachment rules: the DNAT target, or the masqueraded destination.
func nftHostportAddr(r NFTRule) (netip.Addr, bool) {
	if r.Table != nftHostportTables[0].Name || (r.Family != "ip" && r.Family != "ip6") || !nftHostportChains[r.Chain] {
		return netip.Addr{}, false
	}
	switch {
	case r.DNAT.IsValid():
		return r.DNAT, true
	case r.Chain == "masquerading" && r.Daddr.IsValid():
		return r.Daddr, true
	}
	return netip.Addr{}, false
}
