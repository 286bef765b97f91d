package fakes

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	cni "github.com/containerd/go-cni"
)

// network is what the emulated plugins read of the loaded conflist.
type network struct {
	name, ifName string
	bytes        []byte
	masquerade   bool   // bridge or ptp with ipMasq
	bridge       string // the bridge plugin's bridge; "" without one
	portmap      bool
	firewall     bool
	adminChain   string
	subnets      []netip.Prefix // host-local's ranges, IPv4 first as configured
	dataDir      string         // host-local's; "" keeps reservations in memory
}

// decodeNetwork applies go-cni's Load options to a go-cni of its own,
// which only parses them, and reads the first network's conflist.
func decodeNetwork(opts []cni.Opt) (*network, error) {
	parser, err := cni.New()
	if err != nil {
		return nil, err
	}
	if err := parser.Load(opts...); err != nil {
		return nil, err
	}
	nets := parser.GetConfig().Networks
	if len(nets) == 0 {
		return nil, nil
	}
	n := &network{name: nets[0].Config.Name, ifName: nets[0].IFName, bytes: []byte(nets[0].Config.Source)}
	for _, p := range nets[0].Config.Plugins {
		if err := n.read([]byte(p.Source)); err != nil {
			return nil, fmt.Errorf("fake CNI: plugin %s of %s: %w", p.Network.Type, n.name, err)
		}
	}
	return n, nil
}

func (n *network) read(plugin []byte) error {
	var p struct {
		Type       string `json:"type"`
		Bridge     string `json:"bridge"`
		IPMasq     bool   `json:"ipMasq"`
		AdminChain string `json:"iptablesAdminChainName"`
		IPAM       struct {
			Type    string `json:"type"`
			DataDir string `json:"dataDir"`
			Subnet  string `json:"subnet"`
			Ranges  [][]struct {
				Subnet string `json:"subnet"`
			} `json:"ranges"`
		} `json:"ipam"`
	}
	if err := json.Unmarshal(plugin, &p); err != nil {
		return err
	}
	switch p.Type {
	case "bridge", "ptp":
		n.masquerade = n.masquerade || p.IPMasq
		if p.Type == "bridge" {
			n.bridge = cmp.Or(p.Bridge, "cni0") // the plugin's default
		}
	case "portmap":
		n.portmap = true
	case "firewall":
		n.firewall, n.adminChain = true, p.AdminChain
	}
	if p.IPAM.Type != "host-local" {
		return nil
	}
	n.dataDir = p.IPAM.DataDir // host-local's default is the host's: never written
	subnets := []string{p.IPAM.Subnet}
	for _, r := range p.IPAM.Ranges {
		if len(r) > 0 {
			subnets = append(subnets, r[0].Subnet)
		}
	}
	for _, s := range subnets {
		if s == "" {
			continue
		}
		pfx, err := netip.ParsePrefix(s)
		if err != nil {
			return err
		}
		n.subnets = append(n.subnets, pfx.Masked())
	}
	return nil
}

// footprints are what the plugins write for (id, addrs, ports).
func (n *network) footprints(id string, addrs []netip.Prefix, ports []cni.PortMapping) []Footprint {
	var fps []Footprint
	for _, a := range addrs {
		fp := Footprint{Network: n.name, ID: id, Addr: a, Masquerade: n.masquerade, Firewall: n.firewall, AdminChain: n.adminChain}
		if n.portmap {
			fp.Ports = ports
		}
		fps = append(fps, fp)
	}
	return fps
}

// reservations is host-local's directory of the network.
func (n *network) reservations() string { return filepath.Join(n.dataDir, n.name) }

// reserve hands out, per subnet, the lowest free address from .2 on,
// as host-local does on a fresh network, and records it as host-local
// does: a file named after the address holding "id\r\nifName".
func (f *CNI) reserve(n *network, id string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range n.subnets {
		a := s.Addr().Next().Next()
		for ; s.Contains(a) && f.reserved(n, a); a = a.Next() {
		}
		if !s.Contains(a) {
			return nil, fmt.Errorf("fake host-local: no address left in %s", s)
		}
		if err := f.hold(n, a, id); err != nil {
			return nil, err
		}
		out = append(out, netip.PrefixFrom(a, s.Bits()))
	}
	return out, nil
}

func (f *CNI) reserved(n *network, a netip.Addr) bool {
	if n.dataDir == "" {
		_, ok := f.memory[a]
		return ok
	}
	_, err := os.Stat(filepath.Join(n.reservations(), a.String()))
	return err == nil
}

func (f *CNI) hold(n *network, a netip.Addr, id string) error {
	if n.dataDir == "" {
		if f.memory == nil {
			f.memory = map[netip.Addr]string{}
		}
		f.memory[a] = id
		return nil
	}
	if err := os.MkdirAll(n.reservations(), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(n.reservations(), a.String()), []byte(id+"\r\n"+n.ifName), 0o600)
}

// release drops id's reservations, as host-local's DEL does.
func (f *CNI) release(n *network, id string) error {
	for a, holder := range f.memory {
		if holder == id {
			delete(f.memory, a)
		}
	}
	if n.dataDir == "" {
		return nil
	}
	entries, err := os.ReadDir(n.reservations())
	if err != nil {
		if os.IsNotExist(err) {
			return nil
		}
		return err
	}
	for _, e := range entries {
		path := filepath.Join(n.reservations(), e.Name())
		raw, err := os.ReadFile(path)
		if err != nil || !strings.HasPrefix(string(raw), id+"\r\n") {
			continue
		}
		if err := os.Remove(path); err != nil {
			return err
		}
	}
	return nil
}

// cachePath is libcni's cached result of (network, id, ifName).
func (f *CNI) cachePath(n *network, id string) string {
	return filepath.Join(f.CacheDir, "results", n.name+"-"+id+"-"+n.ifName)
}

// cache writes the result as libcni's ADD does.
func (f *CNI) cache(n *network, call Call, addrs []netip.Prefix) error {
	ips := make([]map[string]string, len(addrs))
	for i, a := range addrs {
		ips[i] = map[string]string{"address": a.String()}
	}
	var args [][2]string
	for k, v := range call.Args {
		args = append(args, [2]string{k, v})
	}
	body, err := json.Marshal(map[string]any{"kind": "cniCacheV1", "containerId": call.ID, "ifName": n.ifName, "networkName": n.name,
		"config": n.bytes, "cniArgs": args, "capabilityArgs": map[string]any{"portMappings": call.PortMappings},
		"result": map[string]any{"cniVersion": "1.0.0", "ips": ips}})
	if err != nil {
		return err
	}
	path := f.cachePath(n, call.ID)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, body, 0o600)
}

// result is a bridge-like result naming addrs on the workload's interface.
func result(ifName, netns string, addrs []netip.Prefix) *cni.Result {
	conf := &cni.Config{Sandbox: netns}
	for _, a := range addrs {
		ip := net.IP(a.Addr().AsSlice())
		gw := net.IP(a.Masked().Addr().Next().AsSlice())
		conf.IPConfigs = append(conf.IPConfigs, &cni.IPConfig{IP: ip, Gateway: gw})
	}
	return &cni.Result{Interfaces: map[string]*cni.Config{ifName: conf}}
}
