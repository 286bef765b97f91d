package footprint

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
)

// libcni caches each attachment's result in <cacheDir>/results/N-ID-IF as
// JSON naming the network, container id, interface and addresses. A DEL
// removes it; the cache is also how libcni's GC finds attachments.

// cachedResult is one libcni cache file of the network.
type cachedResult struct {
	path, id string
	addrs    []netip.Addr
}

// cachePath is where libcni caches the result of one attachment.
func cachePath(cacheDir, network, id, ifName string) string {
	return filepath.Join(cacheDir, "results", fmt.Sprintf("%s-%s-%s", network, id, ifName))
}

// cachePaths lists every cache file that may be network's.
func cachePaths(cacheDir, network string) []string {
	paths, _ := filepath.Glob(filepath.Join(cacheDir, "results", globEscape(network)+"-*"))
	return paths
}

func globEscape(s string) string {
	return strings.NewReplacer(`*`, `\*`, `?`, `\?`, `[`, `\[`, `\`, `\\`).Replace(s)
}

// readCachedResult parses a libcni cache file; ok is false when it is
// absent or not provably network's.
func readCachedResult(path, network string) (r cachedResult, ok bool, err error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			err = nil
		}
		return cachedResult{}, false, err
	}
	var cached struct {
		ContainerID string `json:"containerId"`
		NetworkName string `json:"networkName"`
		Result      struct {
			IPs []struct {
				Address string `json:"address"`
			} `json:"ips"`
		} `json:"result"`
	}
	if json.Unmarshal(raw, &cached) != nil || cached.NetworkName != network || !IsContainerID(cached.ContainerID) {
		return cachedResult{}, false, nil // not provably this network's: leave it
	}
	r = cachedResult{path: path, id: cached.ContainerID}
	for _, ip := range cached.Result.IPs {
		if p, err := netip.ParsePrefix(ip.Address); err == nil {
			r.addrs = append(r.addrs, p.Addr().Unmap())
		}
	}
	return r, true, nil
}

// removeCachedResult removes a cache file of an attachment being cleaned.
func (c *Cleaner) removeCachedResult(r cachedResult) {
	if err := os.Remove(r.path); err != nil && !errors.Is(err, os.ErrNotExist) {
		c.fail(fmt.Errorf("removing cached result: %w", err))
		return
	}
	c.noteRemoved(KindCachedResult, r.id, r.path)
}
