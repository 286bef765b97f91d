package footprint

import (
	"reflect"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/host"
)

// The views build what they read from the footprints (iptReader,
// nftReader). These are the lists they read, chains and tables in the
// order they are listed: a change here changes what a run lists and in
// which order, which golden dumps and call logs see.
func TestTheViewsReadWhatTheFootprintsName(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want any
	}{
		{"every run that reads the tables first lists POSTROUTING, CNI-HOSTPORT-DNAT, then CNI-FORWARD",
			sharedIPTChains, []tableChain{{"nat", "POSTROUTING"}, {"nat", "CNI-HOSTPORT-DNAT"}, {"filter", "CNI-FORWARD"}}},
		{"a sweep lists nat, then filter",
			sweptTables, []string{"nat", "filter"}},
		{"a sweep keeps the rules of the shared chains only",
			sweptChains, map[string]map[string]bool{"nat": {"POSTROUTING": true, "CNI-HOSTPORT-DNAT": true}, "filter": {"CNI-FORWARD": true}}},
		{"a drift check reads nat and filter",
			checkedTables, []string{"nat", "filter"}},
		{"a drift check lists the built-in chains first, in iptables-save's order, then the shared ones",
			liveSharedChains, map[string][]string{
				"nat":    {"PREROUTING", "OUTPUT", "POSTROUTING", "CNI-HOSTPORT-DNAT", "CNI-HOSTPORT-SETMARK", "CNI-HOSTPORT-MASQ"},
				"filter": {"FORWARD", "CNI-FORWARD"},
			}},
		{"nftables: the masquerade table, then portmap's ip and ip6 tables",
			nftTables, []host.NFTable{{Family: "inet", Name: "cni_plugins_masquerade"}, {Family: "ip", Name: "cni_hostport"}, {Family: "ip6", Name: "cni_hostport"}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !reflect.DeepEqual(c.got, c.want) {
				t.Errorf("got %v, want %v", c.got, c.want)
			}
		})
	}
}

func TestAnAttachmentChainIsNamedByAPrefixAndHexDigits(t *testing.T) {
	hex := func(n int) string { return strings.Repeat("0a", n)[:n] }
	for _, c := range []struct {
		name  string
		chain string
		want  bool
	}{
		{"the bridge's masquerade chain", "CNI-" + hex(24), true},
		{"portmap's DNAT chain", "CNI-DN-" + hex(21), true},
		{"portmap's legacy SNAT chain", "CNI-SN-" + hex(21), true},
		{"a real attachment's chains", Attachment{"net", "abc"}.DNATChain(), true},
		{"a shared chain", "CNI-HOSTPORT-DNAT", false},
		{"a prefix followed by other than hex digits", "CNI-DX-" + hex(21), false},
		{"upper-case digits", "CNI-" + strings.ToUpper(hex(23)) + "A", false},
		{"one character short", "CNI-" + hex(23), false},
		{"another prefix", "KUBE-" + hex(23), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := isAttachmentChain(c.chain); got != c.want {
				t.Errorf("isAttachmentChain(%q) = %v, want %v", c.chain, got, c.want)
			}
		})
	}
}
