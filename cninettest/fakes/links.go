package fakes

import (
	"slices"
	"sort"
	"sync"
)

// Links is a fake host.Links: the names of the host's network devices.
// The zero value holds none.
type Links struct {
	mu    sync.Mutex
	names map[string]bool
	calls []string

	// FailDelete, when set, is returned by every DeleteLink.
	FailDelete error
}

// Add adds devices, as a plugin that creates them (bandwidth's ifb).
func (l *Links) Add(names ...string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.names == nil {
		l.names = map[string]bool{}
	}
	for _, n := range names {
		l.names[n] = true
	}
}

// Names returns the devices there, sorted.
func (l *Links) Names() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for n := range l.names {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
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
	return l.names[name], nil
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
	removed := l.names[name]
	delete(l.names, name)
	return removed, nil
}
