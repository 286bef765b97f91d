package integration

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
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

// A runtime's DEL of an attachment whose hostport rules are the only ones
// of its container id runs portmap's own DEL on portmap's nftables
// backend: the force cleanup then finds nothing of it left
// (cninet_cleanup_removed_total counts nothing for the network). With a
// second attachment of the same container on another network holding
// port mappings, portmap is left out of the first one's DEL (its nftables
// DEL would take the other's rules too) and the cleanup removes the
// rules by proof; the other keeps answering.
func TestThickDelRunsPortmapWhenItsRulesAreTheAttachmentsOwn(t *testing.T) {
	netsandbox.Require(t)
	var set netsandbox.PluginSet
	for _, s := range netsandbox.PluginSets(t) {
		if s.Backend == "nftables" {
			set = s
		}
	}
	if set.Name == "" {
		t.Fatal("no plugin set with portmap's nftables backend")
	}
	r := newThickRig(t, set, "1.1.0", true)
	other := newNetwork(t, set, false)
	r.addNetwork(other, "1.1.0")
	base := baseline(t)
	w := netsandbox.NewWorkload(t)
	cleaned := `cninet_cleanup_removed_total{|cni_name="` + r.name() + `"|cninet_backend="nftables"`
	r.mustCnitool(portArgs(28321, 8080), "add", r.name(), w.Path)
	r.mustCnitool(portArgs(28321, 8080), "del", r.name(), w.Path)
	if hasLine(metricsOf(t, r.metrics), strings.Split(cleaned, "|")) {
		t.Fatalf("the force cleanup removed state of network %s after a DEL: portmap's own DEL did not run:\n%s", r.name(), metricsOf(t, r.metrics))
	}

	stop := serveHTTP(t, w, 8080, "own-"+set.Name)
	eth1 := []string{"CNI_IFNAME=eth1"}
	r.mustCnitool(portArgs(28322, 8080), "add", r.name(), w.Path)
	r.mustCnitool(append(portArgs(28323, 8080), eth1...), "add", other.cfg.NetworkName, w.Path)
	r.mustCnitool(portArgs(28322, 8080), "del", r.name(), w.Path)
	if body, err := fetch(other.gw4, 28323); err != nil || body != "hello from own-"+set.Name {
		t.Fatalf("the other network's mapped port after the DEL: %q, %v", body, err)
	}
	if !hasLine(metricsOf(t, r.metrics), strings.Split(cleaned, "|")) {
		t.Fatal("portmap ran in the DEL though the container's other attachment had hostport rules: the cleanup removed nothing")
	}
	r.mustCnitool(append(portArgs(28323, 8080), eth1...), "del", other.cfg.NetworkName, w.Path)
	stop()
	allow := r.nw.allowance()
	allow.Chains = append(allow.Chains, other.allowance().Chains...)
	allow.Links = append(allow.Links, other.allowance().Links...)
	assertNoLeaks(t, base, allow)
}

// metricsOf is the daemon's /metrics page.
func metricsOf(t *testing.T, addr string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(body)
}

// A runtime's GC lists valid attachments by container and interface
// (cnitool's GC lists none, so the request is sent as the shim forwards
// it, for the runtime cnitool): listing the container's eth0 keeps the attachment; listing the
// same container under net1 only collects it, the workload's eth0 and
// everything of it included.
func TestThickGCCollectsAnInterfaceTheRuntimeDoesNotList(t *testing.T) {
	netsandbox.Require(t)
	set := netsandbox.PluginSets(t)[0]
	r := newThickRig(t, set, "1.1.0", false)
	base := baseline(t)
	w := netsandbox.NewWorkload(t)
	r.mustCnitool(portArgs(28331, 8080), "add", r.name(), w.Path)
	files, err := filepath.Glob(filepath.Join("/var/lib/cni/results", r.name()+"-cnitool-*-eth0"))
	if err != nil || len(files) != 1 {
		t.Fatalf("the runtime's cached result of the attachment: %v (%v)", files, err)
	}
	id := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(files[0]), r.name()+"-"), "-eth0")
	gc := func(ifName string) {
		t.Helper()
		body := fmt.Sprintf(`{"protocol":1,"command":"GC","owner":"cnitool","config":{"cniVersion":"1.1.0","name":%q,"type":"cninet-shim","cni.dev/valid-attachments":[{"containerID":%q,"ifname":%q}]}}`,
			r.name(), id, ifName)
		if status, answer := r.post("POST", []byte(body)); status != http.StatusOK {
			t.Fatalf("GC listing %s/%s: HTTP %d %s", id, ifName, status, answer)
		}
	}
	gc("eth0")
	if !hasInterface(t, w, "eth0") {
		t.Fatal("a GC that listed the container's eth0 took it")
	}
	gc("net1")
	if hasInterface(t, w, "eth0") {
		t.Fatal("the workload keeps eth0 after a GC that listed the container under net1 only")
	}
	forgetRuntimeCache(t, r.name())
	assertNoLeaks(t, base, r.nw.allowance())
}

// A runtime attaches one container to one network under two interface
// names (eth0, then net1), each with a port mapping of its own: both
// ports answer; eth0's DEL leaves every rule of net1's attachment, and
// the workload's lo up, at every instant (sampled from other
// goroutines), and net1's port answering; net1's DEL then leaves
// nothing, and the sampler of net1's rules sees that DEL drop them (its
// positive control; the lo sampler's is in connect_test.go).
func TestThickOneNetworkUnderTwoInterfaces(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		r := newThickRig(t, set, "1.1.0", false)
		base := baseline(t)
		w := netsandbox.NewWorkload(t)
		id := fmt.Sprintf("itif-%d", networkSeq.Add(1))
		as := func(ifName string, hostPort int) []string {
			return append(portArgs(hostPort, 8080), "CNI_CONTAINERID="+id, "CNI_IFNAME="+ifName)
		}
		stop := serveHTTP(t, w, 8080, "two-"+set.Name)
		r.mustCnitool(as("eth0", 28341), "add", r.name(), w.Path)
		res := addResult(t, r.mustCnitool(as("net1", 28342), "add", r.name(), w.Path), "1.1.0")
		var net1Addrs []netip.Addr
		for _, ip := range res.IPs {
			a, _ := netip.AddrFromSlice(ip.Address.IP)
			net1Addrs = append(net1Addrs, a.Unmap())
		}
		for _, port := range []int{28341, 28342} {
			if body, err := fetch(r.nw.gw4, port); err != nil || body != "hello from two-"+set.Name {
				t.Fatalf("host port %d with both interfaces attached: %q, %v", port, body, err)
			}
		}
		net1Rules := func() (int, error) { return countRulesOf(r.name(), id+".net1", net1Addrs) }
		before, err := net1Rules()
		if err != nil || before == 0 {
			t.Fatalf("net1's rules before eth0's DEL: %d, %v; want some", before, err)
		}
		sampleWhile(t, "the workload's lo up while eth0's DEL runs", 1, loopbackUpCount(w), func() {
			sampleWhile(t, "net1's rules while eth0's DEL runs", before, net1Rules, func() {
				r.mustCnitool(as("eth0", 28341), "del", r.name(), w.Path)
			})
		})
		if body, err := fetch(r.nw.gw4, 28342); err != nil || body != "hello from two-"+set.Name {
			t.Fatalf("net1's host port after eth0's DEL: %q, %v", body, err)
		}
		if hasInterface(t, w, "eth0") || !hasInterface(t, w, "net1") {
			t.Fatalf("after eth0's DEL the workload has eth0: %v, net1: %v; want net1 alone", hasInterface(t, w, "eth0"), hasInterface(t, w, "net1"))
		}
		// The net1 sampler's positive control: net1's own DEL drops the
		// count it watches.
		sampleDropWhile(t, "net1's rules during its own DEL", before, net1Rules, func() {
			r.mustCnitool(as("net1", 28342), "del", r.name(), w.Path)
		})
		stop()
		assertNoLeaks(t, base, r.nw.allowance())
	})
}
