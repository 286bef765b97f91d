package catalog

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/containernetworking/cni/libcni"
	"github.com/seed1280861d/cninet/internal/registry"
)

// Backends the plugins can masquerade and map ports with. The bridge and
// ptp plugins choose with "ipMasqBackend", portmap with "backend"; the
// firewall plugin has no nftables backend.
const (
	BackendIPTables = "iptables"
	BackendNFTables = "nftables"
)

// Which firewall backend each plugin really uses on this host. A plugin
// told "backend" (portmap) or "ipMasqBackend" (bridge, ptp) uses that;
// portmap's conditions imply one; otherwise an upstream plugin with
// nftables backends picks nftables by itself where iptables cannot run
// and nft can, and iptables everywhere else. The firewall plugin has no
// nftables backend. What matters to cninet: a DEL of portmap's nftables
// backend deletes by the bare container id, so it must be kept from a
// workload's other networks (HostportNFT), and a cleanup needs iptables
// only where a plugin of the network uses it (NeedsIPTables).

// netfilterPlugin is one plugin of a conflist that writes firewall rules,
// with the backend its conf names ("" when it names none).
type netfilterPlugin struct {
	typ, explicit string
}

// netfilterPlugins lists the plugins of list that write firewall rules:
// bridge and ptp with ipMasq, portmap, and the firewall plugin with its
// iptables backend.
func netfilterPlugins(list *libcni.NetworkConfigList) []netfilterPlugin {
	var out []netfilterPlugin
	for _, p := range list.Plugins {
		var conf struct {
			IPMasq        bool      `json:"ipMasq"`
			IPMasqBackend string    `json:"ipMasqBackend"`
			Backend       string    `json:"backend"`
			ConditionsV4  *[]string `json:"conditionsV4"`
			ConditionsV6  *[]string `json:"conditionsV6"`
		}
		if json.Unmarshal(p.Bytes, &conf) != nil {
			continue
		}
		switch typ := p.Network.Type; typ {
		case "bridge", "ptp":
			if conf.IPMasq {
				out = append(out, netfilterPlugin{typ, conf.IPMasqBackend})
			}
		case "portmap":
			backend := conf.Backend
			for _, conds := range []*[]string{conf.ConditionsV4, conf.ConditionsV6} {
				if backend == "" && conds != nil && len(*conds) > 0 && (*conds)[0] != "" {
					if c := (*conds)[0][0]; c == '-' || c == '!' {
						backend = BackendIPTables
					} else {
						backend = BackendNFTables
					}
				}
			}
			out = append(out, netfilterPlugin{typ, backend})
		case "firewall":
			if conf.Backend == "" || conf.Backend == BackendIPTables {
				out = append(out, netfilterPlugin{typ, BackendIPTables})
			}
		}
	}
	return out
}

// hostFirewall is what this host offers the plugins, probed once per
// Configurator: whether iptables can run, and whether nft can.
type hostFirewall struct {
	once               sync.Once
	iptables, nftables bool
}

// probeFirewall tells whether iptables and nftables can be used here,
// through the Configurator's own seams (the same binaries on the same
// PATH as the plugins', or the fakes of a test).
func (p *Plugins) probeFirewall() (iptables, nftables bool) {
	p.firewall.once.Do(func() {
		_, err := p.iptOpener.Get(false)
		p.firewall.iptables = err == nil
		_, err = p.nftOpener.Get()
		p.firewall.nftables = err == nil
	})
	return p.firewall.iptables, p.firewall.nftables
}

// backendOf is the backend plugin np really uses on this host.
func (p *Plugins) backendOf(ctx context.Context, np netfilterPlugin) string {
	if np.explicit != "" {
		return np.explicit
	}
	if ipt, nft := p.probeFirewall(); !ipt && nft && p.lacksNFTables(ctx, np.typ) == "" {
		return BackendNFTables
	}
	return BackendIPTables
}

// Backends is the backend each plugin of conf that writes firewall rules
// really uses here, by plugin type.
func (p *Plugins) Backends(conf Conf) map[string]string {
	out := make(map[string]string, len(conf.Info.netfilter))
	for _, np := range conf.Info.netfilter {
		out[np.typ] = p.backendOf(context.Background(), np)
	}
	return out
}

// HostportNFT reports whether conf's portmap uses its nftables backend
// here: its DEL deletes by the bare container id.
func (p *Plugins) HostportNFT(conf Conf) bool {
	if conf.Info.Footprint.HostportNFT { // "backend": "nftables"
		return true
	}
	for _, np := range conf.Info.netfilter {
		if np.typ == "portmap" && p.backendOf(context.Background(), np) == BackendNFTables {
			return true
		}
	}
	return false
}

// NeedsIPTables reports whether a plugin of conf uses iptables here: a
// cleanup of it without iptables is incomplete.
func (p *Plugins) NeedsIPTables(conf Conf) bool {
	for _, np := range conf.Info.netfilter {
		if p.backendOf(context.Background(), np) == BackendIPTables {
			return true
		}
	}
	return false
}

// Recorded is conf's chain as the host registry records it: each
// plugin with the backend it really uses here.
func (p *Plugins) Recorded(conf Conf) []registry.Plugin {
	backends := p.Backends(conf)
	out := make([]registry.Plugin, len(conf.Info.PluginTypes))
	for i, typ := range conf.Info.PluginTypes {
		out[i] = registry.Plugin{Type: typ, Backend: backends[typ]}
	}
	return out
}
