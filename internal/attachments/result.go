package attachments

import (
	"encoding/json"
	"net"
	"net/netip"
	"slices"

	types100 "github.com/containernetworking/cni/pkg/types/100"

	cni "github.com/containerd/go-cni"
	"github.com/seed1280861d/cninet/internal/registry"
)

// resultAddrs returns every address of a CNI result.
func resultAddrs(res *cni.Result) []netip.Addr {
	var out []netip.Addr
	if res == nil {
		return nil
	}
	for _, ifc := range res.Interfaces {
		if ifc == nil {
			continue
		}
		for _, ip := range ifc.IPConfigs {
			if ip == nil {
				continue
			}
			if a, ok := netip.AddrFromSlice(ip.IP); ok && !a.Unmap().IsUnspecified() {
				out = append(out, a.Unmap())
			}
		}
	}
	return out
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
