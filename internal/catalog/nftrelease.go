package catalog

import (
	"context"
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/seed1280861d/cninet/internal/errs"
)

// firstNFTablesRelease is the first release of the reference plugins with
// nftables backends for masquerading and port mapping.
const firstNFTablesRelease = "v1.6.1"

// nftablesRequest is one plugin of a conflist that asks for an nftables
// backend.
type nftablesRequest struct {
	plugin, field string
}

// nftablesRequests lists the plugins of list that ask for nftables.
func nftablesRequests(list *libcni.NetworkConfigList) []nftablesRequest {
	var reqs []nftablesRequest
	for _, p := range list.Plugins {
		var conf struct {
			IPMasqBackend string `json:"ipMasqBackend"`
			Backend       string `json:"backend"`
		}
		if json.Unmarshal(p.Bytes, &conf) != nil {
			continue
		}
		if conf.IPMasqBackend == BackendNFTables {
			reqs = append(reqs, nftablesRequest{p.Network.Type, "ipMasqBackend"})
		}
		if conf.Backend == BackendNFTables {
			reqs = append(reqs, nftablesRequest{p.Network.Type, "backend"})
		}
	}
	return reqs
}

// CheckBackends fails (errs.InvalidConfig) when the conflist asks a
// plugin for an nftables backend that the installed binary cannot
// provide. An older plugin ignores the field and silently uses iptables,
// so Setup would work, just not as configured: Status is where that is
// said.
func (p *Plugins) CheckBackends(ctx context.Context, list *libcni.NetworkConfigList) error {
	var refused []string
	for _, req := range nftablesRequests(list) {
		if why := p.lacksNFTables(ctx, req.plugin); why != "" {
			refused = append(refused, fmt.Sprintf("plugin %s cannot provide %s %q: %s", req.plugin, req.field, BackendNFTables, why))
		}
	}
	if len(refused) > 0 {
		return fmt.Errorf("%w: network %q: %s", errs.InvalidConfig, list.Name, strings.Join(refused, "; "))
	}
	return nil
}

// lacksNFTables says why a plugin binary has no nftables backend, or ""
// when it has one or that cannot be ruled out. A binary built by `go
// install` records its release; otherwise the CNI spec versions it
// supports tell: every release with nftables backends supports spec 1.1.0.
func (p *Plugins) lacksNFTables(ctx context.Context, plugin string) string {
	if plugin == "firewall" {
		return "the firewall plugin has no nftables backend (use iptables or firewalld)"
	}
	path, err := invoke.FindInPath(plugin, p.dirs)
	if err != nil {
		return "" // missing plugins are reported on their own
	}
	if info, err := buildinfo.ReadFile(path); err == nil && isRelease(info.Main.Version) {
		if releaseBefore(info.Main.Version, firstNFTablesRelease) {
			return fmt.Sprintf("%s is release %s; nftables backends need %s or later", path, info.Main.Version, firstNFTablesRelease)
		}
		return ""
	}
	if versions := p.versions.of(ctx, p.lib, plugin); versions != nil && !slices.Contains(versions, "1.1.0") {
		return fmt.Sprintf("%s supports CNI spec versions up to %s, so it predates the nftables backends (%s)",
			path, versions[len(versions)-1], firstNFTablesRelease)
	}
	return ""
}

// isRelease reports a module version of the form vX.Y.Z.
func isRelease(v string) bool { _, ok := releaseNumbers(v); return ok }

// releaseBefore reports whether release a is older than release b.
func releaseBefore(a, b string) bool {
	na, _ := releaseNumbers(a)
	nb, _ := releaseNumbers(b)
	return slices.Compare(na, nb) < 0
}

func releaseNumbers(v string) ([]int, bool) {
	parts := strings.Split(strings.TrimPrefix(v, "v"), ".")
	if !strings.HasPrefix(v, "v") || len(parts) != 3 {
		return nil, false
	}
	nums := make([]int, 3)
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil {
			return nil, false
		}
		nums[i] = n
	}
	return nums, true
}
