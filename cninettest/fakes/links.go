package fakes

import (
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"

	"github.com/seed1280861d/cninet/host"
)

// Links is a fake host.Links and host.LinkInspector: the host's network
// devices, and the devices of workloads' namespaces by path. The zero
// value holds none.
type Links struct {
	mu    sync.Mutex
	links map[string]host.LinkInfo            // the host's, by name
	netns map[string]map[string]host.LinkInfo // a namespace's path -> its devices by name
	calls []string

	// FailDelete, when set, is returned by every DeleteLink; FailList
	// by every ListLinks and LinkIn.
	FailDelete, FailList error
}

// Add adds devices by name, as a plugin that creates them (bandwidth's
// ifb), down and with no master or MAC.
func (l *Links) Add(names ...string) {
	for _, n := range names {
		l.AddLinks(host.LinkInfo{Name: n})
	}
}

// AddLinks adds devices to the host's namespace, or replaces those of
// the same name (their Addrs are not kept: ListLinks lists none).
func (l *Links) AddLinks(links ...host.LinkInfo) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.links == nil {
		l.links = map[string]host.LinkInfo{}
	}
	for _, link := range links {
		link.Addrs = nil
		l.links[link.Name] = link
	}
}

// AddIn places devices, with their addresses, in the namespace mounted
// at netns, which exists from then on (with no device, when none is
// given), replacing those of the same name.
func (l *Links) AddIn(netns string, links ...host.LinkInfo) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.netns == nil {
		l.netns = map[string]map[string]host.LinkInfo{}
	}
	if l.netns[netns] == nil {
		l.netns[netns] = map[string]host.LinkInfo{}
	}
	for _, link := range links {
		link.Addrs = slices.Clone(link.Addrs)
		l.netns[netns][link.Name] = link
	}
}

// addAddrs adds addrs to the device name of the namespace at netns,
// making both (up) where they are not there.
func (l *Links) addAddrs(netns, name string, addrs []netip.Prefix) {
	l.mu.Lock()
	link, ok := l.netns[netns][name]
	l.mu.Unlock()
	if !ok {
		link = host.LinkInfo{Name: name, Up: true}
	}
	for _, a := range addrs {
		if !slices.Contains(link.Addrs, a) {
			link.Addrs = append(link.Addrs, a)
		}
	}
	l.AddIn(netns, link)
}

// dropAddrs takes addrs off the device name of the namespace at netns,
// and deletes the device when no address is left on it.
func (l *Links) dropAddrs(netns, name string, addrs []netip.Prefix) {
	l.mu.Lock()
	defer l.mu.Unlock()
	link, ok := l.netns[netns][name]
	if !ok {
		return
	}
	link.Addrs = slices.DeleteFunc(slices.Clone(link.Addrs), func(a netip.Prefix) bool { return slices.Contains(addrs, a) })
	if len(link.Addrs) == 0 {
		delete(l.netns[netns], name)
		return
	}
	l.netns[netns][name] = link
}

// DeleteIn deletes a device of the namespace mounted at netns, as the
// kernel does with a veth's peer when the veth goes; removed is false
// when it was not there.
func (l *Links) DeleteIn(netns, name string) (removed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, removed = l.netns[netns][name]
	delete(l.netns[netns], name)
	return removed
}

// RemoveNetns removes the namespace mounted at netns with its devices,
// as a runtime does when a workload is gone.
func (l *Links) RemoveNetns(netns string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.netns, netns)
}

// Names returns the devices there, sorted.
func (l *Links) Names() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Sorted(maps.Keys(l.links))
}

// Calls returns every call received, like "DeleteLink ifb0".
func (l *Links) Calls() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.calls)
}

// LinkExists implements host.Links.
func (l *Links) LinkExists(name string) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, "LinkExists "+name)
	_, ok := l.links[name]
	return ok, nil
}

// DeleteLink implements host.Links: removed is false when there was no
// such device.
func (l *Links) DeleteLink(name string) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, "DeleteLink "+name)
	if l.FailDelete != nil {
		return false, l.FailDelete
	}
	_, removed := l.links[name]
	delete(l.links, name)
	return removed, nil
}

// ListLinks implements host.LinkInspector: the host's devices, sorted by
// name, without addresses.
func (l *Links) ListLinks() ([]host.LinkInfo, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, "ListLinks")
	if l.FailList != nil {
		return nil, l.FailList
	}
	out := make([]host.LinkInfo, 0, len(l.links))
	for _, link := range l.links {
		out = append(out, link)
	}
	slices.SortFunc(out, func(a, b host.LinkInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// LinkIn implements host.LinkInspector: a device AddIn placed in the
// namespace mounted at netns; a namespace never added, or removed, is an
// error wrapping os.ErrNotExist.
func (l *Links) LinkIn(netns, name string) (host.LinkInfo, bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.calls = append(l.calls, "LinkIn "+netns+" "+name)
	if l.FailList != nil {
		return host.LinkInfo{}, false, l.FailList
	}
	devices, ok := l.netns[netns]
	if !ok {
		return host.LinkInfo{}, false, fmt.Errorf("netns %s: %w", netns, &os.PathError{Op: "open", Path: netns, Err: os.ErrNotExist})
	}
	link, found := devices[name]
	link.Addrs = slices.Clone(link.Addrs)
	return link, found, nil
}
