package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// The CLI's commands are checked on the host they change, not only by
// their exit codes and output: a host is snapshotted before a command
// (netsandbox.TakeSnapshot: iptables and ip6tables, the plugins'
// nftables rules, the CNI state directories, the links), and what the
// workload holds afterwards, or what it left, is read from the difference
// and from host-local's reservation files.

// hostCheck is a baseline of the sandbox's host, and what the test's
// networks share and may leave: their bridges and admin chain.
type hostCheck struct {
	base  netsandbox.Snapshot
	allow netsandbox.Allowance
}

func newHostCheck(t *testing.T, bridges ...string) hostCheck {
	t.Helper()
	base, err := netsandbox.TakeSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	return hostCheck{base: base, allow: netsandbox.Allowance{Chains: []string{"NOMAD-ADMIN"}, Links: bridges}}
}

// added is what the host holds now and did not at the baseline, besides
// shared infrastructure.
func (h hostCheck) added(t *testing.T) []string {
	t.Helper()
	now, err := netsandbox.TakeSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	return netsandbox.Leaks(h.base, now, h.allow)
}

// rulesNaming returns the added iptables rules that name addr as a host
// (firewall, masquerade) or as a DNAT destination (portmap).
func rulesNaming(added []string, addr string) []string {
	var out []string
	for _, l := range added {
		if strings.HasPrefix(l, "iptables ") && (strings.Contains(l, " "+addr+"/32 ") || strings.Contains(l, "--to-destination "+addr+":")) {
			out = append(out, l)
		}
	}
	return out
}

// assertAttached fails unless the workload at addr holds on the host what
// an attachment through the CLI's conflist makes: the firewall plugin's
// CNI-FORWARD rule, the bridge's masquerade, a DNAT to containerPort when
// it has a port mapping (containerPort > 0), and host-local's reservation
// of addr in ipamDir.
func (h hostCheck) assertAttached(t *testing.T, when, addr, ipamDir, network string, containerPort string) {
	t.Helper()
	rules := rulesNaming(h.added(t), addr)
	want := map[string]func(string) bool{
		"the firewall's CNI-FORWARD rule": func(l string) bool {
			return strings.HasPrefix(l, "iptables filter -A CNI-FORWARD ") && strings.Contains(l, "-d "+addr+"/32 ")
		},
		"the bridge's masquerade": func(l string) bool {
			return strings.HasPrefix(l, "iptables nat -A POSTROUTING -s "+addr+"/32 ")
		},
	}
	if containerPort != "" {
		want["portmap's DNAT"] = func(l string) bool { return strings.Contains(l, "--to-destination "+addr+":"+containerPort) }
	}
	for what, match := range want {
		found := false
		for _, l := range rules {
			found = found || match(l)
		}
		if !found {
			t.Errorf("%s: %s of %s is not on the host; rules naming it:\n  %s", when, what, addr, strings.Join(rules, "\n  "))
		}
	}
	if _, err := os.Stat(filepath.Join(ipamDir, network, addr)); err != nil {
		t.Errorf("%s: host-local's reservation of %s on %s: %v", when, addr, network, err)
	}
	if t.Failed() {
		t.FailNow()
	}
}

// assertDetached fails if any iptables rule names addr, or its
// reservation is still in ipamDir.
func (h hostCheck) assertDetached(t *testing.T, when, addr, ipamDir, network string) {
	t.Helper()
	if rules := rulesNaming(h.added(t), addr); len(rules) > 0 {
		t.Fatalf("%s: %d rule(s) still name %s:\n  %s", when, len(rules), addr, strings.Join(rules, "\n  "))
	}
	if _, err := os.Stat(filepath.Join(ipamDir, network, addr)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("%s: host-local's reservation of %s on %s is still there (%v)", when, addr, network, err)
	}
}

// assertNothingLeft fails unless the host holds nothing it did not hold
// at the baseline but shared infrastructure. The host end of a deleted
// namespace's veth goes a moment after the namespace: it waits up to 10s
// while only veths are left.
func (h hostCheck) assertNothingLeft(t *testing.T, when string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		left := h.added(t)
		onlyVeths := len(left) > 0
		for _, l := range left {
			onlyVeths = onlyVeths && strings.HasPrefix(l, "link veth")
		}
		if len(left) == 0 {
			return
		}
		if !onlyVeths || time.Now().After(deadline) {
			t.Fatalf("%s: %d item(s) left on the host:\n  %s", when, len(left), strings.Join(left, "\n  "))
		}
	}
}

// assertUnchanged fails unless the host holds exactly what it held at the
// baseline: nothing added, nothing removed.
func (h hostCheck) assertUnchanged(t *testing.T, when string) {
	t.Helper()
	now, err := netsandbox.TakeSnapshot()
	if err != nil {
		t.Fatal(err)
	}
	var changed []string
	for _, l := range netsandbox.Leaks(h.base, now, netsandbox.Allowance{}) {
		changed = append(changed, "added "+l)
	}
	for _, l := range netsandbox.Leaks(now, h.base, netsandbox.Allowance{}) {
		changed = append(changed, "removed "+l)
	}
	if len(changed) > 0 {
		t.Fatalf("%s: the host changed:\n  %s", when, strings.Join(changed, "\n  "))
	}
}
