package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/identity"
	"github.com/seed1280861d/cninet/internal/registry"
)

// The reboot shape: what a host keeps of n attachments across a reboot.
// The kernel forgot their rules and tmpfs their reservations (/run/cni),
// but libcni's cache (/var/lib/cni) and the host registry
// (/var/lib/cninet) are on disk: a cached result and a record of each.
// GC detaches each recorded attachment as Teardown does.

const (
	libcniResults = "/var/lib/cni/results"
	registryDir   = registry.DefaultDir
)

// cachedResult is a's libcni cache file as libcni writes it after the
// default bridge conflist's ADD (bridge, then firewall and portmap
// passing the result on): the host's bridge and veth, the workload's
// eth0, its addresses and route, the args and port mapping it was given.
func (a fakeAttachment) cachedResult(conf []byte) ([]byte, error) {
	gw4 := a.Subnet4.Addr().Next()
	return json.Marshal(map[string]any{
		"kind": "cniCacheV1", "containerId": a.ID, "config": conf, "ifName": "eth0", "networkName": a.Network,
		"netns":          "/var/run/netns/" + a.ID,
		"cniArgs":        [][2]string{{"IgnoreUnknown", "1"}, {"NOMAD_ALLOC_ID", a.ID}},
		"capabilityArgs": map[string]any{"portMappings": []map[string]any{{"hostPort": a.Port, "containerPort": 8080, "protocol": "tcp"}}},
		"result": map[string]any{
			"cniVersion": "1.0.0",
			"interfaces": []map[string]any{
				{"name": "cni0", "mac": "aa:bb:cc:00:00:01"},
				{"name": "veth" + a.ID[max(0, len(a.ID)-5):], "mac": "aa:bb:cc:00:00:02"},
				{"name": "eth0", "mac": "aa:bb:cc:00:00:03", "sandbox": "/var/run/netns/" + a.ID},
			},
			"ips": []map[string]any{
				{"interface": 2, "address": netip.PrefixFrom(a.IP4, a.Subnet4.Bits()).String(), "gateway": gw4.String()},
				{"interface": 2, "address": netip.PrefixFrom(a.IP6, a.Subnet6.Bits()).String()},
			},
			"routes": []map[string]any{{"dst": "0.0.0.0/0"}},
			"dns":    map[string]any{},
		},
	})
}

// record is a's host registry record as Setup leaves it: attached, with
// its addresses, args, port mapping, conflist and plugins.
func (a fakeAttachment) record(conf []byte, backend string) *registry.Record {
	ports, _ := json.Marshal([]map[string]any{{"hostPort": a.Port, "containerPort": 8080, "protocol": "tcp"}})
	return &registry.Record{Owner: gcOwner, Key: identity.Key{Network: a.Network, ID: a.ID, IfName: "eth0"},
		NetNS: "/var/run/netns/" + a.ID, State: registry.Attached, Addresses: []netip.Addr{a.IP4, a.IP6},
		Args:         [][2]string{{"IgnoreUnknown", "1"}, {"NOMAD_ALLOC_ID", a.ID}},
		Capabilities: map[string]json.RawMessage{"portMappings": ports}, ConfList: conf,
		Plugins: []registry.Plugin{{Type: "loopback"}, {Type: "bridge", Backend: backend},
			{Type: "firewall", Backend: cninet.BackendIPTables}, {Type: "portmap", Backend: backend}},
	}
}

// writeRebootLeak writes the reboot shape of r's attachments 0..n-1 with
// backend's conflist: a cached result and a registry record each, and
// no rule or reservation.
func writeRebootLeak(r fakeRange, backend string, n int) error {
	conf, err := gcConfList(r, backend)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(libcniResults, 0o700); err != nil {
		return err
	}
	reg, err := registry.Open(registryDir)
	if err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		a := r.at(i)
		raw, err := a.cachedResult(conf)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(libcniResults, fmt.Sprintf("%s-%s-eth0", a.Network, a.ID)), raw, 0o600); err != nil {
			return err
		}
		if err := reg.Put(a.record(conf, backend)); err != nil {
			return err
		}
	}
	return nil
}

// rebootLeft counts what is left of the reboot shape of r's attachments
// 0..n-1: cached results and registry records.
func rebootLeft(r fakeRange, n int) (cached, records int, err error) {
	reg, err := registry.Open(registryDir)
	if err != nil {
		return 0, 0, err
	}
	all, err := reg.All()
	if err != nil {
		return 0, 0, err
	}
	ids := map[string]bool{}
	for i := 0; i < n; i++ {
		ids[r.at(i).ID] = true
	}
	for _, rec := range all.Records {
		if rec.Network == r.network && ids[rec.ID] {
			records++
		}
	}
	entries, err := os.ReadDir(libcniResults)
	if err != nil && !os.IsNotExist(err) {
		return 0, 0, err
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), r.network+"-") {
			cached++
		}
	}
	return cached, records, nil
}

// checkRebootGone fails unless GC left nothing of the reboot shape:
// no cached result, record, rule or reservation of attachments 0..n-1.
func checkRebootGone(r fakeRange, n int) error {
	cached, records, err := rebootLeft(r, n)
	if err != nil {
		return err
	}
	if cached+records != 0 {
		return fmt.Errorf("GC left %d cached results and %d registry records of %d attachments", cached, records, n)
	}
	return checkGone(r, n, "GC")
}
