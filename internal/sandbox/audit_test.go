package sandbox

import (
	"reflect"
	"testing"
)

func snap(rules ...string) Snapshot {
	s := Snapshot{Rules: map[string]bool{}, Files: map[string]bool{}, Links: map[string]bool{}}
	for _, r := range rules {
		s.Rules[r] = true
	}
	return s
}

func TestLeaksIgnoresSharedInfrastructureAndReportsEverythingPerAttachment(t *testing.T) {
	base := snap("iptables nat :POSTROUTING")
	now := snap(
		"iptables nat :POSTROUTING",
		"iptables nat :CNI-HOSTPORT-DNAT",
		"iptables nat -A PREROUTING -m addrtype --dst-type LOCAL -j CNI-HOSTPORT-DNAT",
		`iptables nat -A CNI-HOSTPORT-SETMARK -m comment --comment "CNI portfwd masquerade mark" -j MARK --set-xmark 0x2000/0x2000`,
		"iptables filter :NOMAD-ADMIN",
		`iptables filter -A CNI-FORWARD -m comment --comment "CNI firewall plugin admin overrides" -j NOMAD-ADMIN`,
		`iptables nat -A POSTROUTING -s 198.18.0.2/32 -m comment --comment "name: \"n\" id: \"a\"" -j CNI-abc`,
		"iptables nat :CNI-abc",
		`iptables nat -A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \"n\" id: \"a\"" -j CNI-DN-abc`,
		"ip6tables filter -A CNI-FORWARD -s fd00:198:18::2/128 -j ACCEPT",
	)
	now.Files["/run/cni/n/198.18.0.2"] = true
	now.Files["/run/cni/n/lock"] = true
	now.Files["/run/cni/n/last_reserved_ip.0"] = true
	now.Files["/var/lib/cni/results/n-a-eth0"] = true
	now.Links["nomad"] = true
	now.Links["veth1234"] = true
	got := Leaks(base, now, Allowance{Chains: []string{"NOMAD-ADMIN"}, Links: []string{"nomad"}})
	want := []string{
		"file /run/cni/n/198.18.0.2",
		"file /var/lib/cni/results/n-a-eth0",
		"ip6tables filter -A CNI-FORWARD -s fd00:198:18::2/128 -j ACCEPT",
		`iptables nat -A CNI-HOSTPORT-DNAT -p tcp -m comment --comment "dnat name: \"n\" id: \"a\"" -j CNI-DN-abc`,
		`iptables nat -A POSTROUTING -s 198.18.0.2/32 -m comment --comment "name: \"n\" id: \"a\"" -j CNI-abc`,
		"iptables nat :CNI-abc",
		"link veth1234",
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

func TestLeaksOfIdenticalSnapshotsIsEmpty(t *testing.T) {
	s := snap("iptables nat :CNI-abc")
	if got := Leaks(s, s, Allowance{}); len(got) != 0 {
		t.Fatalf("got %v", got)
	}
}
