package integration

import (
	"testing"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// The drifts of each family and backend: on a dual-stack network the
// IPv6 rules come back with the IPv4 ones; on a host without iptables,
// where the plugins keep everything in nftables, the nftables drifts are
// seen and repaired with no iptables at all.

// A dual-stack network: after the nat table is flushed, after a firewall
// reload and after nft flush ruleset, Repair restores both families'
// rules as the plugins wrote them and the port answers on both gateways.
func TestOnADualStackNetworkRepairRestoresTheIPv6RulesToo(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		nw := newNetwork(t, set, true)
		c := newConfigurator(t, set, nw.conf)
		base := baseline(t)
		var ds []drift
		for _, d := range driftsNamed(t, "the nat table flushed", "every table flushed and its chains deleted (a firewall reload)", "nft flush ruleset") {
			if d.applies(set) {
				ds = append(ds, d)
			}
		}
		checkAndRepairEachDrift(t, nw, c, ds)
		assertNoLeaks(t, base, nw.allowance())
	})
}

// A host without iptables on PATH, upstream's plugins without the
// firewall plugin (it has no nftables backend): whether the plugins pick
// nftables by themselves or the conflist names it, the drifts that apply
// there — nft flush ruleset, the hostport table flushed, the masquerade
// table flushed, the reservation file deleted — are seen and repaired
// (checkAndRepairEachDrift), and Teardown leaves nothing, all without
// iptables.
func TestWithoutIPTablesOnPATHTheNFTablesDriftsAreRepaired(t *testing.T) {
	set := upstreamSet(t)
	for _, tc := range []struct {
		name    string
		backend string
	}{
		{"the plugins pick nftables", ""},
		{"the conflist names nftables", cninet.BackendNFTables},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := set
			s.Backend = tc.backend
			nw := newNetwork(t, s, false)
			if tc.backend == "" {
				nw.conf = withoutFirewall(t, nw.conf) // and naming no backend
			} else {
				nw.conf = withoutPluginType(t, nw.conf, "firewall")
			}
			base := baseline(t)
			t.Run("no iptables on PATH", func(t *testing.T) {
				pathWithoutIPTables(t)
				c := newConfigurator(t, s, nw.conf)
				checkAndRepairEachDrift(t, nw, c, driftsNamed(t, "nft flush ruleset", "the hostport table flushed",
					"the masquerade table flushed", "its reservation file deleted"))
			})
			assertNoLeaks(t, base, nw.allowance())
		})
	}
}
