package footprint

import (
	"encoding/json"
	"path/filepath"
)

// DefaultHostLocalDataDir is where host-local keeps its reservations
// unless its configuration names another dataDir.
const DefaultHostLocalDataDir = "/var/lib/cni/networks"

// Plugin is one plugin of a conflist: its type and its configuration.
type Plugin struct {
	Type  string
	Bytes []byte
}

// NetworkOf returns what the cleaner must know about the network a
// conflist defines: host-local's reservation directories, whether its
// portmap uses nftables, whether it runs the firewall plugin and bandwidth, and where tuning
// keeps its files. IfName, IfNames and CacheDir are the caller's.
func NetworkOf(name string, plugins []Plugin) Network {
	n := Network{Name: name}
	for _, p := range plugins {
		var conf struct {
			Backend string `json:"backend"`
			DataDir string `json:"dataDir"`
			IPAM    struct {
				Type    string `json:"type"`
				DataDir string `json:"dataDir"`
			} `json:"ipam"`
		}
		if json.Unmarshal(p.Bytes, &conf) != nil {
			continue
		}
		switch p.Type {
		case "portmap":
			n.HostportNFT = n.HostportNFT || conf.Backend == "nftables"
		case "firewall":
			n.Firewall = true
		case "bandwidth":
			n.Bandwidth = true
		case "tuning":
			n.TuningDirs = appendOnce(n.TuningDirs, orDefault(conf.DataDir, DefaultTuningDir))
		}
		if conf.IPAM.Type == "host-local" {
			n.IPAMDirs = appendOnce(n.IPAMDirs, filepath.Join(orDefault(conf.IPAM.DataDir, DefaultHostLocalDataDir), name))
		}
	}
	return n
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func appendOnce(list []string, s string) []string {
	for _, have := range list {
		if have == s {
			return list
		}
	}
	return append(list, s)
}
