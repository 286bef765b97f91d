package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/buildinfo"
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

func cmdArgs(socket, version string) *skel.CmdArgs { return cmdArgsWithin(socket, version, "") }

// cmdArgsWithin is cmdArgs with the shim config's "timeout" ("": none).
func cmdArgsWithin(socket, version, timeout string) *skel.CmdArgs {
	conf := fmt.Sprintf(`{"cniVersion":%q,"name":"web","type":"cninet-shim","socket":%q,"timeout":%q,"runtimeConfig":{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}}`, version, socket, timeout)
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
	// As the daemon serves the runtime's ADD: for the owner the shim's
	// DEL then names (the runtime that runs it).
	ctx := cninet.WithOwner(context.Background(), thick.OwnerOf(&thick.Request{Owner: runtimeName()}, &thick.NetConf{}))
	if _, err := c.Connect(ctx, &cninet.Allocation{ID: "c1"}, "web", "/proc/self/ns/net", cninet.ConnectOptions{IfName: "eth0"}); err != nil {
		t.Fatal(err)
	}
	if res, err := c.CachedResult("c1", "web", "eth0"); err != nil || res == nil {
		t.Fatalf("no cached result after the ADD: %v", err)
	}
}

func TestDelWithTheDaemonDownRunsInProcess(t *testing.T) {
	info, log := recorder(t)
	attach(t, info)
	socket := filepath.Join(t.TempDir(), "cninet.sock") // nobody listens
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
	assertDetachedHere(t, info, log)
}

// assertDetachedHere wants the DEL of c1/eth0 run through the delegate
// and libcni's cached result gone.
func assertDetachedHere(t *testing.T, info thick.Info, log string) {
	t.Helper()
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
}

// assertNotDetachedHere wants no DEL run in the shim: the delegate saw
// none, and libcni's cached result is still there.
func assertNotDetachedHere(t *testing.T, info thick.Info, log string) {
	t.Helper()
	if calls, _ := os.ReadFile(log); strings.Contains(string(calls), "DEL") {
		t.Fatalf("the delegate saw %q, want no DEL run in the shim", calls)
	}
	c, err := thick.NewConfigurator(info, nil, nil, useFakes)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if res, err := c.CachedResult("c1", "web", "eth0"); err != nil || res == nil {
		t.Fatalf("cached result: %v, %v; want the attachment's, untouched", res, err)
	}
}

// silentDaemon is a daemon on a socket in a temp dir that never gives a
// final answer until the test ends; released is closed then.
type silentDaemon func(t *testing.T) (socket string, released <-chan struct{})

// The kinds of daemon that never answer.
var silentDaemons = []struct {
	name   string
	daemon silentDaemon
}{
	{"a stopped daemon (the kernel queues the connection, nobody accepts it)", func(t *testing.T) (string, <-chan struct{}) {
		socket := filepath.Join(t.TempDir(), "cninet.sock")
		l, err := net.Listen("unix", socket)
		if err != nil {
			t.Fatal(err)
		}
		released := make(chan struct{})
		t.Cleanup(func() { close(released); l.Close() })
		return socket, released
	}},
	{"a deadlocked daemon (it accepts the connection and never reads)", func(t *testing.T) (string, <-chan struct{}) {
		socket := filepath.Join(t.TempDir(), "cninet.sock")
		l, err := net.Listen("unix", socket)
		if err != nil {
			t.Fatal(err)
		}
		released := make(chan struct{})
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() { <-released; c.Close() }()
			}
		}()
		t.Cleanup(func() { close(released); l.Close() })
		return socket, released
	}},
	{"a daemon that reads the request and never answers", func(t *testing.T) (string, <-chan struct{}) {
		return hangingDaemon(t, false)
	}},
	{"a daemon that acknowledges the request and never answers", func(t *testing.T) (string, <-chan struct{}) {
		return hangingDaemon(t, true)
	}},
}

// hangingDaemon reads each request, acknowledges it when acknowledge is
// set, and answers only when the test ends.
func hangingDaemon(t *testing.T, acknowledge bool) (string, <-chan struct{}) {
	socket := filepath.Join(t.TempDir(), "cninet.sock")
	l, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{})
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		if acknowledge {
			w.WriteHeader(thick.StatusAcknowledged)
		}
		<-released
	})}
	go srv.Serve(l)
	t.Cleanup(func() { close(released); srv.Close() })
	return socket, released
}

// within runs command and fails the test when it is still waiting after
// a minute (the limits under test are a fraction of a second).
func within(t *testing.T, command func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- command() }()
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("still waiting for the daemon after a minute")
	}
	return nil
}

// A DEL that the daemon does not answer within the limit runs in the
// shim, under the registry's locks, without waiting for the daemon.
func TestDelOnASilentDaemonRunsInProcess(t *testing.T) {
	for _, tc := range silentDaemons {
		t.Run(tc.name, func(t *testing.T) {
			info, log := recorder(t)
			attach(t, info)
			socket, released := tc.daemon(t)
			if err := thick.WriteInfo(socket, info); err != nil {
				t.Fatal(err)
			}
			s := newShim(&strings.Builder{})
			s.tweaks = []func(*cninet.Config){useFakes}
			s.answerGrace = 50 * time.Millisecond
			if err := within(t, func() error { return s.del(cmdArgsWithin(socket, "1.1.0", "200ms")) }); err != nil {
				t.Fatal(err)
			}
			select {
			case <-released:
				t.Fatal("the DEL returned only once the daemon was released")
			default:
			}
			assertDetachedHere(t, info, log)
		})
	}
}

// The other commands give up on a silent daemon with the CNI code of an
// unavailable daemon, naming its socket, and run nothing.
func TestOtherCommandsOnASilentDaemonGiveUp(t *testing.T) {
	s := newShim(&strings.Builder{})
	s.answerGrace = 50 * time.Millisecond
	commands := []struct {
		name    string
		command func(*skel.CmdArgs) error
		code    uint
	}{
		{"ADD is try again later", s.add, types.ErrTryAgainLater},
		{"CHECK is try again later", s.check, types.ErrTryAgainLater},
		{"GC is try again later", s.gc, types.ErrTryAgainLater},
		{"STATUS is plugin not available", s.status, types.ErrPluginNotAvailable},
	}
	for _, daemon := range silentDaemons {
		for _, tc := range commands {
			t.Run(tc.name+" with "+daemon.name, func(t *testing.T) {
				socket, released := daemon.daemon(t)
				var cerr *types.Error
				err := within(t, func() error { return tc.command(cmdArgsWithin(socket, "1.1.0", "200ms")) })
				if !errors.As(err, &cerr) || cerr.Code != tc.code || !strings.Contains(cerr.Msg, socket) {
					t.Fatalf("got %v, want code %d naming %s", err, tc.code, socket)
				}
				select {
				case <-released:
					t.Fatal("gave up only once the daemon was released")
				default:
				}
			})
		}
	}
}

// An answer is the runtime's, error or not: the shim never runs a DEL
// itself after the daemon answered (it ran the DEL, or decided not to).
func TestDelAnsweredWithAnErrorIsNotRunAgain(t *testing.T) {
	cases := []struct {
		name, answer string
		code         uint
	}{
		{"a request that found no free slot before its deadline", `{"code":11,"msg":"cninet daemon busy: not run: no free slot before the request's deadline"}`, types.ErrTryAgainLater},
		{"a DEL that met a held xtables lock", `{"code":11,"msg":"xtables lock held by another process"}`, types.ErrTryAgainLater},
		{"a daemon draining before it exits", `{"code":11,"msg":"cninet daemon busy: draining before exit"}`, types.ErrTryAgainLater},
		{"a DEL that could not remove everything", `{"code":102,"msg":"cleanup failed"}`, thick.CodeCleanupFailed},
		{"a shim the daemon finds incompatible", `{"code":104,"msg":"incompatible cninet-shim"}`, thick.CodeIncompatible},
	}
	for _, tc := range cases {
		t.Run(tc.name+" is returned as is", func(t *testing.T) {
			info, log := recorder(t)
			attach(t, info)
			socket, _ := fakeDaemon(t, http.StatusInternalServerError, tc.answer)
			if err := thick.WriteInfo(socket, info); err != nil {
				t.Fatal(err)
			}
			s := newShim(&strings.Builder{})
			s.tweaks = []func(*cninet.Config){useFakes}
			var cerr *types.Error
			if err := s.del(cmdArgs(socket, "1.1.0")); !errors.As(err, &cerr) || cerr.Code != tc.code {
				t.Fatalf("got %v, want the daemon's code %d", err, tc.code)
			}
			assertNotDetachedHere(t, info, log)
		})
	}
}

// With the daemon down, the shim runs plugins only from an info file root
// wrote: one another user could have changed is refused, and the DEL
// fails (code 102) naming it, without running anything.
func TestDelRefusesAnUntrustedInfoFile(t *testing.T) {
	info, log := recorder(t)
	attach(t, info)
	socket := filepath.Join(t.TempDir(), "cninet.sock")
	if err := thick.WriteInfo(socket, info); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(thick.InfoPath(socket), 0o666); err != nil {
		t.Fatal(err)
	}
	s := newShim(&strings.Builder{})
	s.tweaks = []func(*cninet.Config){useFakes}
	var cerr *types.Error
	if err := s.del(cmdArgs(socket, "1.1.0")); !errors.As(err, &cerr) || cerr.Code != thick.CodeCleanupFailed ||
		!strings.Contains(cerr.Msg, thick.InfoPath(socket)) || !strings.Contains(cerr.Msg, "writable by group or others") {
		t.Fatalf("got %v, want code 102 naming %s and its mode", err, thick.InfoPath(socket))
	}
	assertNotDetachedHere(t, info, log)
}

// Every request names the shim's protocol and release, and when the
// shim stops waiting for the acknowledgement and for the answer.
func TestRequestsCarryTheShimsProtocolAndLimits(t *testing.T) {
	socket, reqs := fakeDaemon(t, http.StatusOK, "{}")
	before := time.Now()
	if err := newShim(&strings.Builder{}).check(cmdArgsWithin(socket, "1.1.0", "45s")); err != nil {
		t.Fatal(err)
	}
	req := (*reqs)[0]
	if req.Protocol != thick.ProtocolVersion || req.ShimVersion != buildinfo.Version() {
		t.Errorf("protocol %d, shim version %q; want %d, %q", req.Protocol, req.ShimVersion, thick.ProtocolVersion, buildinfo.Version())
	}
	if req.AckBy == nil || req.AckBy.Before(before.Add(thick.SilenceLimit)) || req.AckBy.After(time.Now().Add(thick.SilenceLimit)) {
		t.Errorf("ackBy %v, want %s after the request", req.AckBy, thick.SilenceLimit)
	}
	if req.Deadline == nil || req.Deadline.Before(before.Add(45*time.Second)) || req.Deadline.After(time.Now().Add(45*time.Second)) {
		t.Errorf("deadline %v, want the configured 45s after the request", req.Deadline)
	}
}

// A "timeout" that is no duration is an invalid network config naming
// the key, and nothing is sent.
func TestABadTimeoutIsRefused(t *testing.T) {
	socket, reqs := fakeDaemon(t, http.StatusOK, "{}")
	s := newShim(&strings.Builder{})
	for name, command := range map[string]func(*skel.CmdArgs) error{"ADD": s.add, "CHECK": s.check, "DEL": s.del, "STATUS": s.status, "GC": s.gc} {
		t.Run(name, func(t *testing.T) {
			var cerr *types.Error
			if err := command(cmdArgsWithin(socket, "1.1.0", "soon")); !errors.As(err, &cerr) || cerr.Code != types.ErrInvalidNetworkConfig ||
				!strings.Contains(cerr.Msg, `"timeout"`) || !strings.Contains(cerr.Msg, "soon") {
				t.Fatalf("got %v, want code 7 naming the key and its value", err)
			}
		})
	}
	if len(*reqs) != 0 {
		t.Fatalf("sent %d requests with a bad timeout", len(*reqs))
	}
}

func TestDelFallbackWithoutInfoUsesTheRuntimesPluginPath(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "cninet.sock")
	info, found, err := thick.ReadInfo(socket, []string{"/opt/cni/bin", "/usr/lib/cni"})
	if err != nil || found || info.ConfDir != thick.DefaultConfDir || info.CacheDir != thick.DefaultCacheDir || len(info.CNIPath) != 2 {
		t.Fatalf("got %+v, %v, %v; want the defaults with CNI_PATH's directories", info, found, err)
	}
}

// The shim's own DEL, with the daemon down and its conf dir emptied
// since the ADD, runs with the conflist the host registry recorded then.
func TestDelWithTheDaemonDownAndTheConflistGoneRunsTheRecordedOne(t *testing.T) {
	info, log := recorder(t)
	attach(t, info)
	conf := filepath.Join(info.ConfDir, "web.conflist")
	saved, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(conf); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(t.TempDir(), "cninet.sock") // nobody listens
	if err := thick.WriteInfo(socket, info); err != nil {
		t.Fatal(err)
	}
	s := newShim(&strings.Builder{})
	s.tweaks = []func(*cninet.Config){useFakes}
	args := cmdArgs(socket, "1.1.0")
	args.Netns = ""
	if err := s.del(args); err != nil {
		t.Fatalf("DEL with the conflist gone: %v, want success", err)
	}
	if err := os.WriteFile(conf, saved, 0o644); err != nil { // for assertDetachedHere's Configurator
		t.Fatal(err)
	}
	assertDetachedHere(t, info, log)
}
