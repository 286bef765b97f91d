package thick

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
)

// delegateRig is a temp dir with a recording plugin ("recorder": logs
// each call, answers ADD with an address, fails STATUS while the file
// down exists) and a conf dir that starts empty.
type delegateRig struct {
	info      Info
	log, down string
	conf      string // the conflist of network web, not written yet
}

func newDelegateRig(t *testing.T) *delegateRig {
	t.Helper()
	dir := t.TempDir()
	r := &delegateRig{log: filepath.Join(dir, "calls.log"), down: filepath.Join(dir, "down")}
	plugins := filepath.Join(dir, "bin")
	if err := os.Mkdir(plugins, 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf(`#!/bin/sh
echo "$CNI_COMMAND $CNI_CONTAINERID $CNI_IFNAME" >> %q
case "$CNI_COMMAND" in
VERSION) echo '{"cniVersion":"1.1.0","supportedVersions":["0.4.0","1.0.0","1.1.0"]}' ;;
ADD) echo '{"cniVersion":"1.1.0","ips":[{"address":"198.18.0.5/24"}]}' ;;
STATUS) if [ -e %q ]; then echo '{"cniVersion":"1.1.0","code":50,"msg":"delegate down"}'; exit 1; fi ;;
esac
`, r.log, r.down)
	if err := os.WriteFile(filepath.Join(plugins, "recorder"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	r.conf = `{"cniVersion":"1.1.0","name":"web","plugins":[{"type":"recorder"}]}`
	r.info = Info{ConfDir: filepath.Join(dir, "delegates"), CNIPath: []string{plugins}, CacheDir: filepath.Join(dir, "cache"), StateDir: filepath.Join(dir, "state")}
	return r
}

func (r *delegateRig) writeConf(t *testing.T) {
	t.Helper()
	if err := os.MkdirAll(r.info.ConfDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.info.ConfDir, "web.conflist"), []byte(r.conf), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (r *delegateRig) removeConf(t *testing.T) {
	t.Helper()
	if err := os.Remove(filepath.Join(r.info.ConfDir, "web.conflist")); err != nil {
		t.Fatal(err)
	}
}

func (r *delegateRig) calls() string {
	b, _ := os.ReadFile(r.log)
	return string(b)
}

func useFakes(cfg *cninet.Config) {
	cfg.IPTables = func(bool) (host.IPTables, error) { return fakes.NewIPTables(), nil }
	cfg.NFTables = func() (host.NFTables, error) { return &fakes.NFTables{}, nil }
	// Devices without host.LinkInspector: a drift check leaves them
	// unchecked, where the default would read the devices of the test's
	// own namespace (the workloads here are /proc/self/ns/net).
	cfg.Links = func() (host.Links, error) { return struct{ host.Links }{&fakes.Links{}}, nil }
}

func (r *delegateRig) open(t *testing.T) *Delegates {
	t.Helper()
	d, err := OpenDelegates(r.info, nil, nil, useFakes)
	if err != nil {
		t.Fatalf("OpenDelegates: %v", err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func TestDelegatesStartWithoutAConflistAndAreNotReadyUntilOneAppears(t *testing.T) {
	cases := []struct {
		name    string
		prepare func(t *testing.T, r *delegateRig)
	}{
		{"an empty conf dir", func(t *testing.T, r *delegateRig) {
			if err := os.MkdirAll(r.info.ConfDir, 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{"a missing conf dir", func(*testing.T, *delegateRig) {}},
		{"a conf dir holding only an unreadable file", func(t *testing.T, r *delegateRig) {
			if err := os.MkdirAll(r.info.ConfDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(r.info.ConfDir, "broken.conflist"), []byte("{"), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newDelegateRig(t)
			tc.prepare(t, r)
			d := r.open(t)
			if _, err := d.Configurator(); !errors.Is(err, ErrNoDelegates) || !strings.Contains(err.Error(), r.info.ConfDir) {
				t.Fatalf("Configurator: %v, want ErrNoDelegates naming %s", err, r.info.ConfDir)
			}
			if err := d.Ready(context.Background()); !errors.Is(err, cninet.ErrNotReady) {
				t.Fatalf("Ready: %v, want ErrNotReady", err)
			}
			r.writeConf(t)
			if err := d.Ready(context.Background()); err != nil {
				t.Fatalf("Ready once a conflist is there: %v", err)
			}
		})
	}
}

func TestDelegatesWatchPicksUpAConfDirChange(t *testing.T) {
	r := newDelegateRig(t)
	d := r.open(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go d.Watch(ctx, 10*time.Millisecond)
	r.writeConf(t)
	// Watch loads it without a request asking: d.c is set by the watch.
	waitFor(t, "the watch to load the new conflist", func() bool {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.c != nil
	})
	c, _ := d.Configurator()
	second := strings.ReplaceAll(r.conf, `"web"`, `"db"`)
	if err := os.WriteFile(filepath.Join(r.info.ConfDir, "db.conflist"), []byte(second), 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the watch to reload with network db", func() bool { return strings.Contains(strings.Join(c.Networks(), ","), "db") })
}

func waitFor(t *testing.T, what string, ok func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if ok() {
			return
		}
	}
	t.Fatalf("gave up waiting for %s", what)
}

func TestDelegatesReadyReflectsTheDelegatesStatus(t *testing.T) {
	r := newDelegateRig(t)
	r.writeConf(t)
	d := r.open(t)
	if err := d.Ready(context.Background()); err != nil {
		t.Fatalf("Ready: %v", err)
	}
	if err := os.WriteFile(r.down, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.Ready(context.Background()); err == nil || !strings.Contains(err.Error(), "delegate down") {
		t.Fatalf("Ready with the delegate's STATUS failing: %v, want its error", err)
	}
}

// A server whose conf dir holds no conflist answers each command as the
// runtime must hear it: not ready, or an unknown network.
func TestServerWithoutAConflist(t *testing.T) {
	r := newDelegateRig(t)
	d := r.open(t)
	c := startServer(t, &Server{Delegates: d, Info: r.info, AllowPeer: func(uint32) bool { return true }})
	cases := []struct {
		name string
		body string
		code uint
	}{
		{"STATUS is not ready (50)", reqBody("STATUS", "", "", "", shimConf), types.ErrPluginNotAvailable},
		{"ADD names an unknown network (7)", reqBody("ADD", "c1", "/proc/self/ns/net", "eth0", shimConf), types.ErrInvalidNetworkConfig},
		{"a DEL of nothing recorded names an unknown network (7)", reqBody("DEL", "c1", "", "eth0", shimConf), types.ErrInvalidNetworkConfig},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			code, cerr := post(t, c, tc.body)
			if code == http.StatusOK || cerr.Code != tc.code || !strings.Contains(cerr.Msg, "no delegate conflist") {
				t.Fatalf("HTTP %d %+v, want code %d saying there is no delegate conflist", code, cerr, tc.code)
			}
		})
	}
	r.writeConf(t)
	if code, cerr := post(t, c, reqBody("STATUS", "", "", "", shimConf)); code != http.StatusOK {
		t.Fatalf("STATUS once a conflist appeared: HTTP %d %+v, want ready", code, cerr)
	}
}

// A DEL of an attachment whose conflist went after its ADD (the daemon
// restarted since) runs the delegate's DEL with the conflist recorded at
// the ADD: nothing leaks, and the runtime hears success, not code 7.
func TestDelAfterTheConflistWentRunsTheRecordedOne(t *testing.T) {
	cases := []struct {
		name  string
		after func(t *testing.T, r *delegateRig)
	}{
		{"the conf dir is empty now", func(t *testing.T, r *delegateRig) { r.removeConf(t) }},
		{"the conf dir is gone", func(t *testing.T, r *delegateRig) {
			if err := os.RemoveAll(r.info.ConfDir); err != nil {
				t.Fatal(err)
			}
		}},
		{"the conf dir holds only other networks", func(t *testing.T, r *delegateRig) {
			r.removeConf(t)
			other := strings.ReplaceAll(r.conf, `"web"`, `"db"`)
			if err := os.WriteFile(filepath.Join(r.info.ConfDir, "db.conflist"), []byte(other), 0o644); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newDelegateRig(t)
			r.writeConf(t)
			first := r.open(t)
			before := startServer(t, &Server{Delegates: first, Info: r.info, AllowPeer: func(uint32) bool { return true }})
			if code, cerr := post(t, before, reqBody("ADD", "c1", "/proc/self/ns/net", "eth0", shimConf)); code != http.StatusOK {
				t.Fatalf("ADD: HTTP %d %+v", code, cerr)
			}
			tc.after(t, r)
			restarted := r.open(t)
			after := startServer(t, &Server{Delegates: restarted, Info: r.info, AllowPeer: func(uint32) bool { return true }})
			if code, cerr := post(t, after, reqBody("DEL", "c1", "", "eth0", shimConf)); code != http.StatusOK {
				t.Fatalf("DEL: HTTP %d %+v, want success", code, cerr)
			}
			if !strings.Contains(r.calls(), "DEL c1 eth0") {
				t.Fatalf("the delegate saw %q, want a DEL of c1 eth0", r.calls())
			}
			if _, err := recordedConfList(r.info.StateDir, "c1", "web", "eth0"); err == nil {
				t.Fatal("the attachment's record outlived its DEL")
			}
		})
	}
}

// A DEL's own Configurator lives for one DEL: it starts no repair
// watcher, whatever the daemon's Configurator runs (a watcher would
// check, and may repair, every runtime's attachments before the DEL is
// answered).
func TestTheConfiguratorOfOneDELWatchesNothing(t *testing.T) {
	for _, conf := range []bool{true, false} {
		t.Run(map[bool]string{true: "the conflist is there", false: "only the record has it"}[conf], func(t *testing.T) {
			r := newDelegateRig(t)
			r.writeConf(t)
			nft := &fakes.NFTables{}
			daemonLike := func(cfg *cninet.Config) {
				useFakes(cfg)
				cfg.NFTables = func() (host.NFTables, error) { return nft, nil }
				cfg.RepairEvery, cfg.RepairAnyOwner = time.Millisecond, true
			}
			d, err := OpenDelegates(r.info, nil, nil, daemonLike)
			if err != nil {
				t.Fatal(err)
			}
			srv := startServer(t, &Server{Delegates: d, Info: r.info, AllowPeer: func(uint32) bool { return true }})
			if code, cerr := post(t, srv, reqBody("ADD", "c1", "/proc/self/ns/net", "eth0", shimConf)); code != http.StatusOK {
				t.Fatalf("ADD: HTTP %d %+v", code, cerr)
			}
			d.Close()
			if !conf {
				r.removeConf(t)
			}
			delNFT := &fakes.NFTables{}
			delLike := func(cfg *cninet.Config) {
				daemonLike(cfg)
				cfg.NFTables = func() (host.NFTables, error) { return delNFT, nil }
			}
			c, err := ConfiguratorForDel(r.info, &Request{ContainerID: "c1", IfName: "eth0"}, &NetConf{Name: "web"}, nil, nil, delLike)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			time.Sleep(50 * time.Millisecond) // fifty of the daemon's intervals
			if n := delNFT.Watchers(); n != 0 {
				t.Fatalf("%d watchers of the ruleset while the DEL's Configurator lived, want none", n)
			}
		})
	}
}
