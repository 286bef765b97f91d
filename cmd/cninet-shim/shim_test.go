package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/thick"
)

const result100 = `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/run/netns/w"}],"ips":[{"address":"198.18.0.5/24","interface":0}]}`

// fakeDaemon answers every request on a socket in a temp dir with status
// and body, and records the requests.
func fakeDaemon(t *testing.T, status int, body string) (socket string, got *[]thick.Request) {
	t.Helper()
	socket = filepath.Join(t.TempDir(), "cninet.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	reqs := &[]thick.Request{}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req thick.Request
		json.NewDecoder(r.Body).Decode(&req)
		*reqs = append(*reqs, req)
		w.WriteHeader(status)
		fmt.Fprint(w, body)
	})}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return socket, reqs
}

func cmdArgs(socket, version string) *skel.CmdArgs {
	conf := fmt.Sprintf(`{"cniVersion":%q,"name":"web","type":"cninet-shim","socket":%q,"runtimeConfig":{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}}`, version, socket)
	return &skel.CmdArgs{ContainerID: "c1", Netns: "/run/netns/w", IfName: "eth0", Args: "K=V", Path: "/opt/cni/bin", StdinData: []byte(conf)}
}

func TestAddForwardsAndPrintsInTheConfigVersion(t *testing.T) {
	for _, version := range []string{"0.3.1", "0.4.0", "1.0.0", "1.1.0"} {
		t.Run("a 1.0.0 delegate result is printed as "+version, func(t *testing.T) {
			socket, reqs := fakeDaemon(t, http.StatusOK, result100)
			var out strings.Builder
			if err := newShim(&out).add(cmdArgs(socket, version)); err != nil {
				t.Fatal(err)
			}
			var res struct {
				CNIVersion string `json:"cniVersion"`
				IPs        []struct{ Address string }
			}
			if err := json.Unmarshal([]byte(out.String()), &res); err != nil || res.CNIVersion != version || len(res.IPs) != 1 || res.IPs[0].Address != "198.18.0.5/24" {
				t.Fatalf("printed %s (%v), want the address as a %s result", out.String(), err, version)
			}
			req := (*reqs)[0]
			if req.Command != "ADD" || req.ContainerID != "c1" || req.NetNS != "/run/netns/w" || req.IfName != "eth0" || req.Args != "K=V" ||
				!strings.Contains(string(req.Config), `"portMappings"`) {
				t.Fatalf("forwarded %+v, want the runtime's id, netns, ifname, args and config", req)
			}
		})
	}
}

func TestDaemonErrorsReachTheRuntimeUnchanged(t *testing.T) {
	socket, _ := fakeDaemon(t, http.StatusInternalServerError, `{"code":123,"msg":"bridge says no","details":"cninet: setup failed"}`)
	s := newShim(&strings.Builder{})
	commands := map[string]func(*skel.CmdArgs) error{"ADD": s.add, "CHECK": s.check, "DEL": s.del, "STATUS": s.status, "GC": s.gc}
	for name, command := range commands {
		t.Run(name+" passes the daemon's code and message", func(t *testing.T) {
			var cerr *types.Error
			if err := command(cmdArgs(socket, "1.1.0")); !errors.As(err, &cerr) || cerr.Code != 123 || cerr.Msg != "bridge says no" {
				t.Fatalf("got %v, want code 123 and the daemon's message", err)
			}
		})
	}
	t.Run("an answer that is no CNI error is internal, with the body", func(t *testing.T) {
		socket, _ := fakeDaemon(t, http.StatusBadGateway, "upstream broke")
		var cerr *types.Error
		if err := s.check(cmdArgs(socket, "1.1.0")); !errors.As(err, &cerr) || cerr.Code != types.ErrInternal || cerr.Details != "upstream broke" {
			t.Fatalf("got %v", err)
		}
	})
}

func TestUnreachableDaemon(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "nobody.sock")
	s := newShim(&strings.Builder{})
	cases := []struct {
		name    string
		command func(*skel.CmdArgs) error
		code    uint
	}{
		{"ADD is try again later", s.add, types.ErrTryAgainLater},
		{"CHECK is try again later", s.check, types.ErrTryAgainLater},
		{"GC is try again later", s.gc, types.ErrTryAgainLater},
		{"STATUS is plugin not available", s.status, types.ErrPluginNotAvailable},
	}
	for _, tc := range cases {
		t.Run(tc.name+", naming the socket", func(t *testing.T) {
			var cerr *types.Error
			if err := tc.command(cmdArgs(socket, "1.1.0")); !errors.As(err, &cerr) || cerr.Code != tc.code || !strings.Contains(cerr.Msg, socket) {
				t.Fatalf("got %v, want code %d naming %s", err, tc.code, socket)
			}
		})
	}
	t.Run("a relative socket path is an invalid network config", func(t *testing.T) {
		var cerr *types.Error
		if err := s.add(cmdArgs("run/cninet.sock", "1.1.0")); !errors.As(err, &cerr) || cerr.Code != types.ErrInvalidNetworkConfig {
			t.Fatalf("got %v", err)
		}
	})
}

// recorder writes a plugin that logs each call and prints a result on
// ADD, and a delegate conflist of network web using it.
func recorder(t *testing.T) (info thick.Info, log string) {
	t.Helper()
	dir := t.TempDir()
	log = filepath.Join(dir, "calls.log")
	plugins, confs := filepath.Join(dir, "bin"), filepath.Join(dir, "delegates")
	for _, d := range []string{plugins, confs} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := fmt.Sprintf(`#!/bin/sh
echo "$CNI_COMMAND $CNI_CONTAINERID $CNI_IFNAME" >> %q
case "$CNI_COMMAND" in
VERSION) echo '{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0","1.1.0"]}' ;;
ADD) echo '{"cniVersion":"1.0.0","ips":[{"address":"198.18.0.5/24"}]}' ;;
esac
`, log)
	if err := os.WriteFile(filepath.Join(plugins, "recorder"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	conf := `{"cniVersion":"1.0.0","name":"web","plugins":[{"type":"recorder"}]}`
	if err := os.WriteFile(filepath.Join(confs, "web.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return thick.Info{ConfDir: confs, CNIPath: []string{plugins}, CacheDir: filepath.Join(dir, "cache"), StateDir: filepath.Join(dir, "state")}, log
}

func useFakes(cfg *cninet.Config) {
	cfg.IPTables = func(bool) (host.IPTables, error) { return fakes.NewIPTables(), nil }
	cfg.NFTables = func() (host.NFTables, error) { return &fakes.NFTables{}, nil }
}

// attach makes the attachment c1/eth0 in network web, as the daemon does.
func attach(t *testing.T, info thick.Info) {
	t.Helper()
	c, err := thick.NewConfigurator(info, hclog.NewNullLogger(), nil, useFakes)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Connect(context.Background(), &cninet.Allocation{ID: "c1"}, "web", "/proc/self/ns/net", cninet.ConnectOptions{IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	if res, err := c.CachedResult("c1", "web", "eth0"); err != nil || res == nil {
		t.Fatalf("no cached result after the ADD: %v", err)
	}
}

func TestDelWithTheDaemonDownRunsInProcess(t *testing.T) {
	cases := []struct {
		name   string
		daemon func(t *testing.T) string // the socket
	}{
		{"when nobody listens on the socket", func(t *testing.T) string { return filepath.Join(t.TempDir(), "cninet.sock") }},
		{"when the daemon is draining (try again later)", func(t *testing.T) string {
			socket, _ := fakeDaemon(t, http.StatusInternalServerError, `{"code":11,"msg":"cninet daemon busy: draining"}`)
			return socket
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			info, log := recorder(t)
			attach(t, info)
			socket := tc.daemon(t)
			if err := thick.WriteInfo(socket, info); err != nil {
				t.Fatal(err)
			}
			s := newShim(&strings.Builder{})
			s.tweaks = []func(*cninet.Config){useFakes}
			args := cmdArgs(socket, "1.1.0")
			args.Netns = "" // the namespace is gone
			if err := s.del(args); err != nil {
				t.Fatal(err)
			}
			calls, _ := os.ReadFile(log)
			if !strings.Contains(string(calls), "DEL c1 eth0") {
				t.Fatalf("the delegate saw %q, want a DEL of c1 eth0", calls)
			}
			c, err := thick.NewConfigurator(info, nil, nil, useFakes)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if res, err := c.CachedResult("c1", "web", "eth0"); err != nil || res != nil {
				t.Fatalf("cached result after the DEL: %v, %v; want none", res, err)
			}
		})
	}
}

func TestDelFallbackWithoutInfoUsesTheRuntimesPluginPath(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "cninet.sock")
	info, found, err := thick.ReadInfo(socket, []string{"/opt/cni/bin", "/usr/lib/cni"})
	if err != nil || found || info.ConfDir != thick.DefaultConfDir || info.CacheDir != thick.DefaultCacheDir || len(info.CNIPath) != 2 {
		t.Fatalf("got %+v, %v, %v; want the defaults with CNI_PATH's directories", info, found, err)
	}
}
