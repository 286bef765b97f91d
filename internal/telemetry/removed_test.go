package telemetry

import (
	"testing"

	"github.com/seed1280861d/cninet/internal/footprint"
)

func TestRemovedItemsAreCountedByKindAndBackend(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		item                  footprint.Item
		wantKind, wantBackend string
	}{
		{"an iptables rule", footprint.Item{Kind: footprint.KindRule, Backend: "iptables", Detail: "iptables -t nat -D POSTROUTING -s 198.18.0.2/32 -j CNI-x"}, "rule", "iptables"},
		{"an ip6tables chain", footprint.Item{Kind: footprint.KindChain, Backend: "ip6tables", Detail: "ip6tables -t nat -X CNI-x"}, "chain", "ip6tables"},
		{"an nftables rule", footprint.Item{Kind: footprint.KindNFTRule, Backend: "nftables", Detail: "nftables rule inet cni_plugins_masquerade masq_checks handle 4"}, "rule", "nftables"},
		{"a host-local reservation", footprint.Item{Kind: footprint.KindReservation, Backend: "files", Detail: "/var/lib/cni/networks/nomad/198.18.0.2"}, "reservation", "files"},
		{"a cached result", footprint.Item{Kind: footprint.KindCachedResult, Backend: "files", Detail: "/var/lib/cni/results/nomad-a-eth0"}, "cached_result", "files"},
		{"an attachment GC detached with DEL", footprint.Item{Kind: "cached attachment", Backend: "cni", Detail: "eth0"}, "cached_attachment", "cni"},
		{"the bandwidth plugin's device", footprint.Item{Kind: footprint.KindLink, Backend: "links", Detail: "device bwp0123"}, "network_device", "links"},
		{"a kind not known yet keeps its name, without spaces; no backend is other", footprint.Item{Kind: "ifb device", Detail: "link bwp0123"}, "ifb_device", "other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := itemKind(tc.item); got != tc.wantKind {
				t.Errorf("kind %q, want %q", got, tc.wantKind)
			}
			if got := itemBackend(tc.item); got != tc.wantBackend {
				t.Errorf("backend %q, want %q", got, tc.wantBackend)
			}
		})
	}
}
