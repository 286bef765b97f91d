package integration

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// GC against the histories of histories_test.go: racing Teardowns, and
// cache files a reboot cut short.

// ghostCache writes, for each network, a cached result of ghost that is
// of's with only the id and the namespace changed: a dead attachment's
// stale cache naming the address of (so the firewall plugin's DEL of the
// ghost deletes of's rules), as after a reboot with IPAM on tmpfs.
func ghostCache(t *testing.T, networks []string, of, ghost string) {
	t.Helper()
	for _, network := range networks {
		for path, data := range cacheFiles(t, network, of) {
			var cached map[string]any
			if err := json.Unmarshal(data, &cached); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			cached["containerId"], cached["netns"] = ghost, "/run/netns/"+ghost // long gone
			out, err := json.Marshal(cached)
			if err != nil {
				t.Fatal(err)
			}
			name := network + "-" + ghost + strings.TrimPrefix(filepath.Base(path), network+"-"+of)
			if err := os.WriteFile(filepath.Join(libcniResults, name), out, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// GC and Teardowns run at once, round after round, on workloads that
// join two networks (portmap's nftables DEL removes the id's rules on
// both), next to dead ids whose stale caches name the addresses of the
// live and the leaving workloads (so libcni's GC takes their firewall
// rules), with a live set that excludes the leaving ones or, taken
// before they stopped, still names some of them. Each round leaves the
// host exactly as it found it: the live workloads intact and reachable,
// nothing of the departed ones, none of their rules added back.
func TestGCConcurrentWithTeardownsKeepsTheLiveAndAddsNothingBack(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		first, second := twoNetworks(t, set)
		h := &gcRace{t: t, first: first, second: second, names: []string{first.cfg.NetworkName, second.cfg.NetworkName}}
		h.c = newMultiConfigurator(t, set, first.conf, [][]byte{second.conf}, cninet.RetryPolicy{})
		allow := allowBoth(first, second)
		base := baseline(t)
		live := map[string]*netsandbox.Workload{}
		for i := 0; i < 2; i++ {
			alloc, w := h.alloc(fmt.Sprintf("live-%d", i), i), netsandbox.NewWorkload(t)
			st, err := h.c.Setup(ctxFor(t, time.Minute), alloc, w.Path)
			if err != nil {
				t.Fatal(err)
			}
			serveHTTP(t, w, 8080, alloc.ID)
			h.liveIDs = append(h.liveIDs, alloc.ID)
			for _, n := range st.Interfaces {
				h.liveAddrs = append(h.liveAddrs, n.Address)
			}
			live[alloc.ID] = w
		}
		for r := 0; r < 3; r++ {
			roundBase := snapshot(t)
			h.round(r)
			if d := settled(func() []string { return diff(roundBase, snapshot(t), allow) }); len(d) > 0 {
				t.Fatalf("round %d changed the host:\n  %s", r, strings.Join(d, "\n  "))
			}
			assertForwardRules(t, fmt.Sprintf("round %d", r), h.liveAddrs, 2)
			for i, id := range h.liveIDs {
				assertReachable(t, fmt.Sprintf("round %d", r), h.port(i), id, first.gw4, second.gw4)
			}
		}
		for i, id := range h.liveIDs {
			if err := h.c.Teardown(ctxFor(t, time.Minute), h.alloc(id, i), live[id].Path); err != nil {
				t.Fatal(err)
			}
			live[id].Delete()
		}
		assertNoLeaks(t, base, allow)
	})
}

// gcRace is the fixture of the GC-versus-Teardown rounds.
type gcRace struct {
	t             *testing.T
	c             *cninet.Configurator
	first, second network
	names         []string
	liveIDs       []string
	liveAddrs     []netip.Addr
}

func (h *gcRace) port(i int) int { return hostPort(h.first.cfg.NetworkName, i) }

func (h *gcRace) alloc(id string, i int) *cninet.Allocation {
	return &cninet.Allocation{ID: id, NetworkNames: h.names, Ports: []cninet.Port{{Value: h.port(i), To: 8080}}}
}

// round sets up three leaving workloads (the first with its namespace
// already deleted) and a dead one, writes the stale caches, and runs the
// leaving ones' Teardowns and a GC at once.
func (h *gcRace) round(r int) {
	t := h.t
	var leaving []*cninet.Allocation
	netns := map[string]string{}
	for i := 0; i < 4; i++ {
		alloc, w := h.alloc(fmt.Sprintf("r%d-%d", r, i), len(h.liveIDs)+i), netsandbox.NewWorkload(t)
		if _, err := h.c.Setup(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
			t.Fatal(err)
		}
		if i == 0 || i == 3 { // the leak-prone way; and the dead one, whose runner is gone
			w.Delete()
		}
		if i < 3 {
			leaving = append(leaving, alloc)
			netns[alloc.ID] = w.Path
		}
	}
	ghostCache(t, h.names, h.liveIDs[r%len(h.liveIDs)], fmt.Sprintf("ghost-%d-live", r))
	gcLive := slices.Clone(h.liveIDs)
	for i, alloc := range leaving {
		ghostCache(t, h.names, alloc.ID, "ghost-"+alloc.ID)
		if i%2 == 1 { // the runner's live list is older than its last stops
			gcLive = append(gcLive, alloc.ID)
		}
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(leaving)+1)
	for i, alloc := range leaving {
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i*r) * 15 * time.Millisecond) // vary the interleaving
			if err := h.c.Teardown(ctxFor(t, time.Minute), alloc, netns[alloc.ID]); err != nil {
				errs <- fmt.Errorf("teardown %s: %w", alloc.ID, err)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		if _, err := h.c.GC(ctxFor(t, time.Minute), gcLive); err != nil {
			errs <- fmt.Errorf("GC: %w", err)
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("round %d: %v", r, err)
	}
}

// A reboot during ADD leaves libcni a zero-byte cache file (see
// containernetworking/cni#1055). GC removes it and nothing else; so does
// a Teardown of its id.
func TestZeroByteCacheFileIsRemovedByGCAndByTeardownAndNothingElse(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		nw := newNetwork(t, set, true)
		c := newConfigurator(t, set, nw.conf)
		base := baseline(t)
		w := netsandbox.NewWorkload(t)
		livePort := hostPort(nw.cfg.NetworkName, 0)
		live := &cninet.Allocation{ID: "live-0", Ports: []cninet.Port{{Value: livePort, To: 8080}}}
		if _, err := c.Setup(ctxFor(t, time.Minute), live, w.Path); err != nil {
			t.Fatal(err)
		}
		serveHTTP(t, w, 8080, live.ID)
		cases := []struct {
			name, id string
			run      func(id string) error
		}{
			{"GC with the live one live", "rebooted-gc", func(id string) error {
				report, err := c.GC(ctxFor(t, time.Minute), []string{live.ID})
				if err == nil && strings.Join(report.IDs(), ",") != id {
					err = fmt.Errorf("GC reported %v, want only %s", report.Removed(), id)
				}
				return err
			}},
			{"Teardown of the rebooted id", "rebooted-td", func(id string) error {
				return c.Teardown(ctxFor(t, time.Minute), &cninet.Allocation{ID: id}, "/run/netns/"+id)
			}},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				before := snapshot(t)
				empty := filepath.Join(libcniResults, nw.cfg.NetworkName+"-"+tc.id+"-eth0")
				if err := os.WriteFile(empty, nil, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := tc.run(tc.id); err != nil {
					t.Fatal(err)
				}
				if d := diff(before, snapshot(t), nw.allowance()); len(d) > 0 {
					t.Fatalf("changed more than the empty cache file, or left it:\n  %s", strings.Join(d, "\n  "))
				}
				assertReachable(t, "afterwards", livePort, live.ID, nw.gw4, nw.gw6)
			})
		}
		if err := c.Teardown(ctxFor(t, time.Minute), live, w.Path); err != nil {
			t.Fatal(err)
		}
		w.Delete()
		assertNoLeaks(t, base, nw.allowance())
	})
}
