package footprint

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/seed1280861d/cninet/internal/hostwork"
)

// libcni caches each attachment's result in <cacheDir>/results/N-ID-IF as
// JSON naming the network, container id, interface and addresses. A DEL
// removes it; libcni's GC finds attachments by it, and the firewall
// plugin's DEL deletes by the addresses it names. A reboot during ADD can
// leave it empty or cut (containernetworking/cni#1055): such a file is
// attributed by its name, and only when that name can be read one way
// among the known networks.

type libcniCache struct{}

// cachedResult is one libcni cache file.
type cachedResult struct {
	net, id, ifName, path string
	addrs                 []netip.Addr
	corrupt               bool // unreadable: attributed by its name alone
}

func (c cachedResult) att() Attachment { return Attachment{c.net, c.id} }

func (libcniCache) prove(v *view, set attSet) []claim {
	return claimsOfFiles(v, set, func(f hostFiles) []cachedResult { return f.cached },
		func(c cachedResult) []netip.Addr { return c.addrs })
}

// holders reads every known network's cached results: another
// attachment's result names an address it holds (static IPAM, or a
// reservation directory on tmpfs that a reboot wiped). A Teardown skips
// the read for an address host-local reserved for the set (contested).
func (libcniCache) holders(v *view, set attSet, addrs addrSet) []claim {
	ask := contested(v, set, addrs)
	if len(ask) == 0 {
		return nil
	}
	var out []claim
	for _, c := range v.allCached() {
		if set[c.att()] {
			continue
		}
		for _, a := range c.addrs {
			if ask[a] {
				out = append(out, claim{a, c.att()})
			}
		}
	}
	return out
}

func (libcniCache) plan(v *view, set attSet, _ *evidence, p *plan) {
	for _, c := range v.files.cached {
		if set[c.att()] {
			p.files = append(p.files, fileChange{kind: KindCachedResult, att: c.att(), path: c.path})
		}
	}
}

func (libcniCache) discover(v *view, found attSet) {
	for _, c := range v.files.cached {
		found[c.att()] = true
	}
}

// allCached returns every known network's cached results, read once.
func (v *view) allCached() []cachedResult {
	if v.whole {
		return v.files.cached
	}
	v.cachedOnce.Do(func() {
		for _, n := range sortedNets(v.nets) {
			v.cachedAll = append(v.cachedAll, readAllCached(v, n)...)
		}
	})
	return v.cachedAll
}

// cachePath is where libcni caches the result of one attachment.
func cachePath(cacheDir, network, id, ifName string) string {
	return filepath.Join(cacheDir, "results", fmt.Sprintf("%s-%s-%s", network, id, ifName))
}

// readAllCached reads every cache file that may be n's.
func readAllCached(v *view, n Network) []cachedResult {
	end := v.meter.Begin(hostwork.File, "cached results of "+n.Name, false)
	defer end(0, 0)
	paths, err := filepath.Glob(filepath.Join(n.CacheDir, "results", globEscape(n.Name)+"-*"))
	v.errs.add(err)
	var out []cachedResult
	for _, path := range paths {
		c, err := readCachedResult(path)
		switch {
		case err == nil && c.net == n.Name:
			out = append(out, c)
		case err != nil && !errors.Is(err, os.ErrNotExist):
			if a, ifName, ok := v.cacheName(filepath.Base(path)); ok && a.Network == n.Name {
				out = append(out, cachedResult{net: a.Network, id: a.ID, ifName: ifName, path: path, corrupt: true})
			}
		}
	}
	return out
}

// readCachedAt reads the cache file of one attachment and interface.
func readCachedAt(v *view, n Network, id, ifName string) (cachedResult, bool) {
	path := cachePath(n.CacheDir, n.Name, id, ifName)
	c, err := readCachedResult(path)
	switch {
	case err == nil:
		return c, c.att() == Attachment{n.Name, id}
	case errors.Is(err, os.ErrNotExist):
		return cachedResult{}, false
	}
	if a, _, ok := v.cacheName(filepath.Base(path)); ok && a == (Attachment{n.Name, id}) {
		return cachedResult{net: n.Name, id: id, ifName: ifName, path: path, corrupt: true}, true
	}
	return cachedResult{}, false
}

// errCorruptCache says a cache file is empty or not a libcni result.
var errCorruptCache = errors.New("not a readable libcni cache file")

// readCachedResult parses a libcni cache file.
func readCachedResult(path string) (cachedResult, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return cachedResult{}, err
	}
	var cached struct {
		ContainerID string `json:"containerId"`
		NetworkName string `json:"networkName"`
		IfName      string `json:"ifName"`
		Result      struct {
			IPs []struct {
				Address string `json:"address"`
			} `json:"ips"`
		} `json:"result"`
	}
	if len(bytes.TrimSpace(raw)) == 0 || json.Unmarshal(raw, &cached) != nil || !IsContainerID(cached.ContainerID) || cached.NetworkName == "" {
		return cachedResult{}, fmt.Errorf("%s: %w", path, errCorruptCache)
	}
	c := cachedResult{net: cached.NetworkName, id: cached.ContainerID, ifName: cached.IfName, path: path}
	for _, ip := range cached.Result.IPs {
		if p, err := netip.ParsePrefix(ip.Address); err == nil {
			c.addrs = append(c.addrs, p.Addr().Unmap())
		}
	}
	return c, nil
}

// cacheName reads an unreadable cache file's name N-ID-IF: the attachment
// and interface, when exactly one known network and one of its interface
// names read it so (network names may contain '-').
func (v *view) cacheName(base string) (Attachment, string, bool) {
	var found []Attachment
	var foundIf string
	for _, n := range sortedNets(v.nets) {
		rest, ok := strings.CutPrefix(base, n.Name+"-")
		if !ok {
			continue
		}
		for _, ifName := range n.ifNames() {
			if id, ok := strings.CutSuffix(rest, "-"+ifName); ok && IsContainerID(id) {
				found, foundIf = append(found, Attachment{n.Name, id}), ifName
			}
		}
	}
	if len(found) != 1 {
		return Attachment{}, "", false
	}
	return found[0], foundIf, true
}

func globEscape(s string) string {
	return strings.NewReplacer(`*`, `\*`, `?`, `\?`, `[`, `\[`, `\`, `\\`).Replace(s)
}

// withholdFromCache rewrites the cached result at path, under cacheDir,
// without the addresses of drop, atomically (writeFileAtomic): the DEL
// that reads it next hands the plugins only what is left. Every other
// byte of the result stays as libcni wrote it.
func withholdFromCache(cacheDir, path string, drop addrSet) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var top, result map[string]json.RawMessage
	var ips []json.RawMessage
	if err := json.Unmarshal(raw, &top); err != nil {
		return fmt.Errorf("%s: %w", path, errCorruptCache)
	}
	if err := json.Unmarshal(top["result"], &result); err != nil {
		return fmt.Errorf("%s: result: %w", path, errCorruptCache)
	}
	if err := json.Unmarshal(result["ips"], &ips); err != nil {
		return fmt.Errorf("%s: result ips: %w", path, errCorruptCache)
	}
	kept := ips[:0]
	for _, ip := range ips {
		var entry struct {
			Address string `json:"address"`
		}
		if json.Unmarshal(ip, &entry) == nil {
			if p, err := netip.ParsePrefix(entry.Address); err == nil && drop[p.Addr().Unmap()] {
				continue
			}
		}
		kept = append(kept, ip)
	}
	if result["ips"], err = json.Marshal(kept); err != nil {
		return err
	}
	if top["result"], err = json.Marshal(result); err != nil {
		return err
	}
	out, err := json.Marshal(top)
	if err != nil {
		return err
	}
	return writeFileAtomic(cacheDir, path, out, fi.Mode().Perm())
}

// expect: the attachment's cached result. libcni's CHECK and DEL read it,
// and the plugins' DELs delete by what it names. cninet writes it again
// from the ADD's result the host registry recorded, as libcni does
// (restore.go); without one recorded it cannot.
func (libcniCache) expect(_ *liveView, a *Live, h *Health) {
	if a.Uncached {
		return
	}
	path := cachePath(a.Net.CacheDir, a.Network, a.ID, a.IfName)
	if _, err := os.Stat(path); err == nil {
		return
	} else if !errors.Is(err, os.ErrNotExist) {
		h.unknown(fmt.Errorf("reading libcni's cached result %s: %w", path, err))
		return
	}
	m := Missing{Plugin: "libcni", Kind: KindCachedResult, Backend: "files", Detail: path, Restore: ByCninet}
	if a.Result == nil || len(a.Result.Raw) == 0 {
		m.Restore, m.Why = NotInPlace, "the host registry records no result to write it from"
	}
	h.miss(m)
}
