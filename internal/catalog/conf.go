package catalog

import (
	"errors"
	"fmt"
	"regexp"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/seed1280861d/cninet/internal/errs"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// NameRule is the CNI rule for network names; cninet applies it to
// bridge names too.
var NameRule = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)

// CheckName rejects a network name no conflist can have
// (errs.InvalidArgument).
func CheckName(name string) error {
	if !NameRule.MatchString(name) {
		return fmt.Errorf("%w: network name %q does not match %s", errs.InvalidArgument, name, NameRule)
	}
	return nil
}

// Conf is one network's conflist as loaded: its bytes, as parsed, and
// what the operations need to know about it.
type Conf struct {
	Bytes []byte
	List  *libcni.NetworkConfigList
	Info  Info
}

// Info is what the operations and the cleanup need to know about a
// loaded conflist.
type Info struct {
	Name         string
	Footprint    footprint.Network // where its attachments' state is (no interface names yet)
	DisableCheck bool
	DisableGC    bool
	PluginTypes  []string
	PortMappings bool            // a plugin declares the portMappings capability
	Capabilities map[string]bool // every capability a plugin declares
	NoIPAM       bool            // no plugin names an IPAM plugin: an L2-only network

	netfilter []netfilterPlugin // the plugins that write firewall rules
}

// NewConf is the Conf of a parsed conflist.
func NewConf(list *libcni.NetworkConfigList) Conf {
	return Conf{Bytes: list.Bytes, List: list, Info: newInfo(list)}
}

// Parse parses and validates conflist bytes; the error says what is
// wrong, without a sentinel (the caller knows which one it is).
func Parse(raw []byte) (Conf, error) {
	list, err := parseConfList(raw)
	if err != nil {
		return Conf{}, err
	}
	return NewConf(list), nil
}

func newInfo(list *libcni.NetworkConfigList) Info {
	info := Info{Name: list.Name, DisableCheck: list.DisableCheck, DisableGC: list.DisableGC, NoIPAM: true}
	plugins := make([]footprint.Plugin, len(list.Plugins))
	for i, p := range list.Plugins {
		info.NoIPAM = info.NoIPAM && p.Network.IPAM.Type == ""
		info.PluginTypes = append(info.PluginTypes, p.Network.Type)
		info.PortMappings = info.PortMappings || p.Network.Capabilities[CapabilityPortMappings]
		for name, on := range p.Network.Capabilities {
			if on {
				if info.Capabilities == nil {
					info.Capabilities = map[string]bool{}
				}
				info.Capabilities[name] = true
			}
		}
		plugins[i] = footprint.Plugin{Type: p.Network.Type, Bytes: p.Bytes}
	}
	info.Footprint = footprint.NetworkOf(list.Name, plugins)
	info.netfilter = netfilterPlugins(list)
	return info
}

// parseConfList parses and validates conflist bytes.
func parseConfList(raw []byte) (*libcni.NetworkConfigList, error) {
	list, err := libcni.ConfListFromBytes(raw)
	if err != nil {
		return nil, err
	}
	return list, validateConfList(list)
}

// validateConfList checks what libcni leaves to run time: a plugin without
// a type only fails when the first workload starts.
func validateConfList(list *libcni.NetworkConfigList) error {
	if !NameRule.MatchString(list.Name) {
		return fmt.Errorf("network name %q does not match %s", list.Name, NameRule)
	}
	if list.CNIVersion != "" {
		if _, err := version.GreaterThanOrEqualTo(list.CNIVersion, "0.1.0"); err != nil {
			return fmt.Errorf("cniVersion %q: %w", list.CNIVersion, err)
		}
	}
	if len(list.Plugins) == 0 {
		return errors.New("conflist has no plugins")
	}
	for i, p := range list.Plugins {
		if p.Network == nil || p.Network.Type == "" {
			return fmt.Errorf("plugin %d has no \"type\"", i)
		}
	}
	return nil
}
