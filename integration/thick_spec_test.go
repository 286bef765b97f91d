package integration

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// An L2-only delegate (a bridge without IPAM) attaches through the shim:
// the runtime gets the delegate's result, interfaces and no address, the
// workload its interface; CHECK passes and DEL leaves nothing.
func TestThickL2OnlyDelegate(t *testing.T) {
	netsandbox.Require(t)
	set := netsandbox.PluginSets(t)[0]
	r := newThickRig(t, set, "1.1.0", false)
	n := networkSeq.Add(1)
	name, bridge := fmt.Sprintf("itl2-%d", n), fmt.Sprintf("itl2br%d", n)
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":%q,"plugins":[{"type":"bridge","bridge":%q}]}`, name, bridge)
	if err := os.WriteFile(filepath.Join(r.confDir, name+".conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	r.writeShimConfOf(name, "1.1.0")
	base := baseline(t)
	w := netsandbox.NewWorkload(t)
	out := r.mustCnitool(nil, "add", name, w.Path)
	var res struct {
		CNIVersion string `json:"cniVersion"`
		Interfaces []struct {
			Name    string `json:"name"`
			Sandbox string `json:"sandbox"`
		} `json:"interfaces"`
		IPs []json.RawMessage `json:"ips"`
	}
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("cnitool add printed no result: %v: %s", err, out)
	}
	inSandbox := false
	for _, i := range res.Interfaces {
		inSandbox = inSandbox || i.Name == "eth0" && i.Sandbox == w.Path
	}
	if res.CNIVersion != "1.1.0" || !inSandbox || len(res.IPs) != 0 {
		t.Fatalf("result %s, want a 1.1.0 result naming eth0 in the workload and no address", out)
	}
	if !hasInterface(t, w, "eth0") {
		t.Fatal("the workload has no eth0 after the ADD")
	}
	r.mustCnitool(nil, "check", name, w.Path)
	r.mustCnitool(nil, "del", name, w.Path)
	if hasInterface(t, w, "eth0") {
		t.Fatal("the workload keeps eth0 after the DEL")
	}
	allow := r.nw.allowance()
	allow.Links = append(allow.Links, bridge)
	assertNoLeaks(t, base, allow)
}

// A runtime's SCTP port mapping, of any case, reaches portmap: its DNAT
// rule for SCTP is there while attached, and DEL leaves nothing.
func TestThickSCTPPortMapping(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		r := newThickRig(t, set, "1.1.0", false)
		base := baseline(t)
		w := netsandbox.NewWorkload(t)
		sctp := []string{`CAP_ARGS={"portMappings": [{"hostPort": 28311, "containerPort": 3868, "protocol": "SCTP"}]}`}
		r.mustCnitool(sctp, "add", r.name(), w.Path)
		if rules := natRules(t); !hasLine(rules, []string{"sctp", "28311"}) {
			t.Fatalf("no SCTP rule for host port 28311 while attached:\n%s", rules)
		}
		r.mustCnitool(sctp, "del", r.name(), w.Path)
		assertNoLeaks(t, base, r.nw.allowance())
	})
}

// hasInterface says whether the workload's namespace has an interface
// named name.
func hasInterface(t *testing.T, w *netsandbox.Workload, name string) bool {
	t.Helper()
	found := false
	err := w.NS.Do(func(ns.NetNS) error {
		_, err := net.InterfaceByName(name)
		found = err == nil
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// natRules are the lines of every iptables and nftables rule of the
// test's namespace that name a port mapping.
func natRules(t *testing.T) string {
	t.Helper()
	var all []string
	for _, cmd := range [][]string{{"iptables-save", "-t", "nat"}, {"nft", "list", "ruleset"}} {
		out, _ := exec.Command(cmd[0], cmd[1:]...).CombinedOutput() // a missing backend lists nothing
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, "dport") {
				all = append(all, strings.TrimSpace(line))
			}
		}
	}
	return strings.Join(all, "\n")
}
