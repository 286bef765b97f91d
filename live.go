package cninet

import (
	"cmp"
	"context"
	"encoding/json"
	"net"
	"net/netip"
	"slices"

	cni "github.com/containerd/go-cni"
	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/registry"
)

// A live attachment, as a drift check sees it (footprint.Live), is built
// from its record in the host registry: the conflist and the backends its
// ADD ran with, its port mappings and capability arguments, and the ADD's
// result (from libcni's cache for a record that has none).

// liveOf returns fa's live attachment: what its record (rec, nil for one
// the registry never saw) and libcni's cache say. netns is the namespace
// the caller named ("" takes the record's).
func (c *Configurator) liveOf(fa foundAttachment, rec *registry.Record, netns string) *footprint.Live {
	att, req := fa.att, fa.req
	l := &footprint.Live{
		Attachment: footprint.Attachment{Network: att.name(), ID: req.id},
		IfName:     att.ifName,
		NetNS:      netns,
		Net:        c.seams.network(att.conf, att.ifName, nil),
		Backends:   map[string]string{},
		Uncached:   att.viaCNI && !c.findPlugins,
	}
	for _, m := range req.mappings {
		l.Mappings = append(l.Mappings, footprint.PortMapping{HostPort: int(m.HostPort), ContainerPort: int(m.ContainerPort),
			Protocol: m.Protocol, HostIP: m.HostIP})
	}
	var raw json.RawMessage
	if rec != nil {
		for _, p := range rec.Plugins {
			if p.Backend != "" {
				l.Backends[p.Type] = p.Backend
			}
		}
		l.Capabilities, raw = rec.Capabilities, rec.Result
		if l.NetNS == "" {
			l.NetNS = rec.NetNS
		}
	} else {
		for _, np := range att.conf.info.netfilter {
			l.Backends[np.typ] = c.plugins.backendOf(context.Background(), np)
		}
	}
	l.Result = c.resultOf(raw, att, req)
	return l
}

// resultOf reads a recorded result, else libcni's cached one; nil when
// there is neither.
func (c *Configurator) resultOf(raw json.RawMessage, att attachment, req request) *footprint.Result {
	var res types.Result
	if len(raw) > 0 {
		var head struct {
			CNIVersion string `json:"cniVersion"`
		}
		if json.Unmarshal(raw, &head) == nil {
			res, _ = version.NewResult(cmp.Or(head.CNIVersion, types100.ImplementedSpecVersion), raw)
		}
	}
	if res == nil {
		res, _ = c.lib.GetNetworkListCachedResult(att.conf.list, &libcni.RuntimeConf{ContainerID: req.id, IfName: att.ifName})
	}
	if res == nil {
		return nil
	}
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		return nil
	}
	out := &footprint.Result{}
	if out.Raw, err = json.Marshal(r); err != nil {
		return nil
	}
	for _, intf := range r.Interfaces {
		if intf == nil {
			intf = &types100.Interface{}
		}
		out.Interfaces = append(out.Interfaces, footprint.ResultInterface{Name: intf.Name, MAC: intf.Mac, Sandbox: intf.Sandbox})
	}
	for _, ip := range r.IPs {
		if ip == nil {
			continue
		}
		p, ok := prefixOf(ip.Address)
		if !ok {
			continue
		}
		i := -1
		if ip.Interface != nil {
			i = *ip.Interface
		}
		out.IPs = append(out.IPs, footprint.ResultIP{Addr: p, Interface: i})
	}
	return out
}

// prefixOf is an address with its prefix length, as a result gives it.
func prefixOf(n net.IPNet) (netip.Prefix, bool) {
	addr, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	addr = addr.Unmap()
	ones, bits := n.Mask.Size()
	if bits == 0 {
		ones = addr.BitLen()
	}
	if addr.Is4() && bits == 128 {
		ones -= 96
	}
	return netip.PrefixFrom(addr, ones), true
}

// rawResult is the result an injected Config.CNI returned, rebuilt from
// go-cni's view of it (which keeps no prefix lengths: each address takes
// the one of the network's IPAM subnet that holds it, else a host
// prefix). rec names the network's conflist.
func rawResult(res *cni.Result, rec *registry.Record) *types100.Result {
	if res == nil {
		return nil
	}
	subnets := ipamSubnets(rec.ConfList)
	out := &types100.Result{CNIVersion: types100.ImplementedSpecVersion}
	names := make([]string, 0, len(res.Interfaces))
	for name := range res.Interfaces {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		cfg := res.Interfaces[name]
		if cfg == nil {
			continue
		}
		i := len(out.Interfaces)
		out.Interfaces = append(out.Interfaces, &types100.Interface{Name: name, Mac: cfg.Mac, Sandbox: cfg.Sandbox})
		for _, ipc := range cfg.IPConfigs {
			addr, ok := netip.AddrFromSlice(ipc.IP)
			if !ok {
				continue
			}
			addr = addr.Unmap()
			bits := addr.BitLen()
			for _, s := range subnets {
				if s.Contains(addr) {
					bits = s.Bits()
				}
			}
			out.IPs = append(out.IPs, &types100.IPConfig{Interface: &i, Address: net.IPNet{IP: addr.AsSlice(), Mask: net.CIDRMask(bits, addr.BitLen())},
				Gateway: ipc.Gateway})
		}
	}
	return out
}

// ipamSubnets are the subnets of the IPAM ranges a conflist names
// ("subnet", and each "ranges" entry's).
func ipamSubnets(confList []byte) []netip.Prefix {
	var list struct {
		Plugins []struct {
			IPAM struct {
				Subnet string `json:"subnet"`
				Ranges [][]struct {
					Subnet string `json:"subnet"`
				} `json:"ranges"`
			} `json:"ipam"`
		} `json:"plugins"`
	}
	if json.Unmarshal(confList, &list) != nil {
		return nil
	}
	var out []netip.Prefix
	add := func(s string) {
		if p, err := netip.ParsePrefix(s); err == nil {
			out = append(out, p.Masked())
		}
	}
	for _, p := range list.Plugins {
		add(p.IPAM.Subnet)
		for _, set := range p.IPAM.Ranges {
			for _, r := range set {
				add(r.Subnet)
			}
		}
	}
	return out
}
