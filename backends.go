package cninet

import (
	"context"
	"encoding/json"
	"sync"

	"github.com/containernetworking/cni/libcni"
	"github.com/seed1280861d/cninet/internal/registry"
)

// Which firewall backend each plugin really uses on this host. A plugin
// told "backend" (portmap) or "ipMasqBackend" (bridge, ptp) uses that;
// portmap's conditions imply one; otherwise an upstream plugin with
// nftables backends picks nftables by itself where iptables cannot run
// and nft can, and iptables everywhere else. The firewall plugin has no
// nftables backend. What matters to cninet: a DEL of portmap's nftables
// backend deletes by the bare container id, so it must be kept from a
// workload's other networks (see detach), and a cleanup needs iptables
// only where a plugin of the network uses it.

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
func (c *Configurator) probeFirewall() (iptables, nftables bool) {
	c.firewall.once.Do(func() {
		_, err := c.iptOpener.Get(false)
		c.firewall.iptables = err == nil
		_, err = c.nftOpener.Get()
		c.firewall.nftables = err == nil
	})
	return c.firewall.iptables, c.firewall.nftables
}

// backendOf is the backend plugin p really uses on this host.
func (c *Configurator) backendOf(ctx context.Context, p netfilterPlugin) string {
	if p.explicit != "" {
		return p.explicit
	}
	if ipt, nft := c.probeFirewall(); !ipt && nft && c.lacksNFTables(ctx, p.typ) == "" {
		return BackendNFTables
	}
	return BackendIPTables
}

// hostportNFT reports whether conf's portmap uses its nftables backend
// here: its DEL deletes by the bare container id.
func (c *Configurator) hostportNFT(conf networkConf) bool {
	if conf.info.footprint.HostportNFT { // "backend": "nftables"
		return true
	}
	for _, p := range conf.info.netfilter {
		if p.typ == "portmap" && c.backendOf(context.Background(), p) == BackendNFTables {
			return true
		}
	}
	return false
}

// needsIPTables reports whether a plugin of conf uses iptables here: a
// cleanup of it without iptables is incomplete.
func (c *Configurator) needsIPTables(conf networkConf) bool {
	for _, p := range conf.info.netfilter {
		if c.backendOf(context.Background(), p) == BackendIPTables {
			return true
		}
	}
	return false
}

// recordedPlugins is conf's chain as the host registry records it: each
// plugin with the backend it really uses here.
func (c *Configurator) recordedPlugins(conf networkConf) []registry.Plugin {
	out := make([]registry.Plugin, len(conf.info.pluginTypes))
	for i, typ := range conf.info.pluginTypes {
		out[i].Type = typ
		for _, p := range conf.info.netfilter {
			if p.typ == typ {
				out[i].Backend = c.backendOf(context.Background(), p)
			}
		}
	}
	return out
}
