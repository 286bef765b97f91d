package thick

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/seed1280861d/cninet"
)

// A result with an interface and an address, and one of an L2-only
// delegate (a bridge or macvlan without IPAM): interfaces, no address.
const (
	resultWithAddress = `{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","mac":"02:00:00:00:00:01","sandbox":"/proc/self/ns/net"}],"ips":[{"address":"198.18.0.5/24","interface":0}]}`
	resultL2Only      = `{"cniVersion":"1.0.0","interfaces":[{"name":"br-l2"},{"name":"eth0","mac":"02:00:00:00:00:02","sandbox":"/proc/self/ns/net"}]}`
)

// delegate is a daemon's Configurator whose network web runs one plugin
// that logs each call ("COMMAND ID IFNAME ARGS") and answers ADD with
// result; it has fake iptables and nftables, and every directory in a
// temp dir.
type delegate struct {
	c     *cninet.Configurator
	log   string
	state string // the host registry's dir
	confs string // the conf dir
}

func newDelegate(t *testing.T, result string) delegate {
	t.Helper()
	return newDelegateOf(t, result, `{"type":"scripted"}`, "")
}

// newDelegateOf is newDelegate with the conflist's plugin config
// (plugin, of type scripted) and a CNI error checkError on CHECK ("":
// CHECK passes).
func newDelegateOf(t *testing.T, result, plugin, checkError string) delegate {
	t.Helper()
	dir := t.TempDir()
	log, plugins, confs, res := filepath.Join(dir, "calls.log"), filepath.Join(dir, "bin"), filepath.Join(dir, "delegates"), filepath.Join(dir, "result.json")
	for _, d := range []string{plugins, confs} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script := fmt.Sprintf(`#!/bin/sh
echo "$CNI_COMMAND $CNI_CONTAINERID $CNI_IFNAME $CNI_ARGS" >> %q
case "$CNI_COMMAND" in
VERSION) echo '{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0","1.1.0"]}' ;;
ADD) cat %q ;;
CHECK) [ -n %q ] && echo %q && exit 1 ;;
esac
exit 0
`, log, res, checkError, checkError)
	files := map[string]string{
		filepath.Join(plugins, "scripted"):   script,
		filepath.Join(confs, "web.conflist"): `{"cniVersion":"1.0.0","name":"web","plugins":[` + plugin + `]}`,
		res:                                  result,
	}
	for path, body := range files {
		if err := os.WriteFile(path, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	info := Info{ConfDir: confs, CNIPath: []string{plugins}, CacheDir: filepath.Join(dir, "cache"), StateDir: filepath.Join(dir, "state")}
	c, err := NewConfigurator(info, nil, nil, useFakes)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return delegate{c: c, log: log, state: info.StateDir, confs: confs}
}

// serve runs one request of the runtime's, with its config, as the
// daemon does.
func (d delegate) serve(t *testing.T, command, ifName, args, config string) ([]byte, error) {
	t.Helper()
	return d.serveAs(t, "c1", command, ifName, args, config)
}

// serveAs is serve for container id.
func (d delegate) serveAs(t *testing.T, id, command, ifName, args, config string) ([]byte, error) {
	t.Helper()
	netns := "/proc/self/ns/net"
	if command == CmdDel {
		netns = ""
	}
	body := fmt.Sprintf(`{"protocol":1,"command":%q,"containerID":%q,"netns":%q,"ifName":%q,"args":%q,"config":%s}`, command, id, netns, ifName, args, config)
	req, conf, err := DecodeRequest(strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	return Serve(context.Background(), d.c, req, conf)
}

func (d delegate) calls(t *testing.T) string {
	t.Helper()
	b, _ := os.ReadFile(d.log)
	return string(b)
}

const webConf = `{"cniVersion":"1.0.0","name":"web","type":"cninet-shim"}`

func TestServeAddPassesTheDelegatesResultBack(t *testing.T) {
	for _, tc := range []struct{ name, result string }{
		{"a result with an address", resultWithAddress},
		{"an L2-only delegate's result, interfaces without any address", resultL2Only},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDelegate(t, tc.result)
			out, err := d.serve(t, CmdAdd, "eth0", "", webConf)
			if err != nil {
				t.Fatalf("ADD: %v (CNI error %+v)", err, ErrorFor(err))
			}
			var got, want map[string]any
			if err := errors.Join(json.Unmarshal(out, &got), json.Unmarshal([]byte(tc.result), &want)); err != nil {
				t.Fatal(err)
			}
			if fmt.Sprint(got["interfaces"]) != fmt.Sprint(want["interfaces"]) || fmt.Sprint(got["ips"]) != fmt.Sprint(want["ips"]) {
				t.Fatalf("result %s, want the delegate's %s", out, tc.result)
			}
			if _, err := d.serve(t, CmdCheck, "eth0", "", webConf); err != nil {
				t.Fatalf("CHECK of the attachment: %v", err)
			}
			if _, err := d.serve(t, CmdDel, "eth0", "", webConf); err != nil {
				t.Fatalf("DEL: %v", err)
			}
			if res, err := d.c.CachedResult("c1", "web", "eth0"); err != nil || res != nil {
				t.Fatalf("after the DEL the cached result is %v, %v; want none", res, err)
			}
		})
	}
}

func TestServePassesCNIArgsAsTheRuntimeSentThem(t *testing.T) {
	for _, tc := range []struct{ name, args, want string }{
		{"no IgnoreUnknown is added", "K8S_POD_NAME=web-0", "K8S_POD_NAME=web-0"},
		{"the runtime's IgnoreUnknown is passed on", "IgnoreUnknown=1;K8S_POD_NAME=web-0", "IgnoreUnknown=1;K8S_POD_NAME=web-0"},
		{"a value holding '=' is passed on whole", "TOKEN=a2V5=dmFs==", "TOKEN=a2V5=dmFs=="},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDelegate(t, resultWithAddress)
			if _, err := d.serve(t, CmdAdd, "eth0", tc.args, webConf); err != nil {
				t.Fatal(err)
			}
			if calls := d.calls(t); !strings.Contains(calls, "ADD c1 eth0 "+tc.want+"\n") {
				t.Fatalf("the delegate saw %q, want an ADD with CNI_ARGS %s", calls, tc.want)
			}
		})
	}
}

func TestServeCheckComparesTheRuntimesPrevResult(t *testing.T) {
	withPrev := func(prev string) string {
		return `{"cniVersion":"1.0.0","name":"web","type":"cninet-shim","prevResult":` + prev + `}`
	}
	for _, tc := range []struct {
		name     string
		config   string
		wantCode uint // 0: healthy
	}{
		{"no prevResult: the delegate's CHECK alone decides", webConf, 0},
		{"a prevResult describing the attachment is healthy", withPrev(resultWithAddress), 0},
		{"a prevResult of an older CNI version describing it is healthy",
			`{"cniVersion":"0.4.0","name":"web","type":"cninet-shim","prevResult":{"cniVersion":"0.4.0","interfaces":[{"name":"eth0","mac":"02:00:00:00:00:01","sandbox":"/proc/self/ns/net"}],"ips":[{"version":"4","address":"198.18.0.5/24","interface":0}]}}`, 0},
		{"a prevResult naming another address is unhealthy",
			withPrev(strings.Replace(resultWithAddress, "198.18.0.5", "198.18.0.6", 1)), CodeCheckFailed},
		{"a prevResult naming no address is unhealthy",
			withPrev(`{"cniVersion":"1.0.0","interfaces":[{"name":"eth0"}]}`), CodeCheckFailed},
		{"a prevResult naming an interface the attachment lacks is unhealthy",
			withPrev(strings.Replace(resultWithAddress, `"eth0"`, `"eth9"`, 1)), CodeCheckFailed},
		{"a prevResult naming the interface with another MAC is unhealthy",
			withPrev(strings.Replace(resultWithAddress, "02:00:00:00:00:01", "02:00:00:00:00:99", 1)), CodeCheckFailed},
		{"a prevResult that is no result object is undecodable", withPrev(`"eth0"`), types.ErrDecodingFailure},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDelegate(t, resultWithAddress)
			if _, err := d.serve(t, CmdAdd, "eth0", "", webConf); err != nil {
				t.Fatal(err)
			}
			_, err := d.serve(t, CmdCheck, "eth0", "", tc.config)
			if tc.wantCode == 0 {
				if err != nil {
					t.Fatalf("CHECK: %v, want healthy", err)
				}
				return
			}
			if cerr := ErrorFor(err); cerr == nil || cerr.Code != tc.wantCode {
				t.Fatalf("CHECK: %v, want CNI error code %d", err, tc.wantCode)
			}
		})
	}
}

// gc runs the runtime's GC of network web with these valid attachments.
func (d delegate) gc(t *testing.T, valid string) error {
	t.Helper()
	body := `{"protocol":1,"command":"GC","config":{"cniVersion":"1.1.0","name":"web","type":"cninet-shim","cni.dev/valid-attachments":` + valid + `}}`
	req, conf, err := DecodeRequest(strings.NewReader(body))
	if err != nil {
		return err
	}
	_, err = Serve(context.Background(), d.c, req, conf)
	return err
}

func TestServeGCHonoursTheValidAttachmentsInterfaces(t *testing.T) {
	for _, tc := range []struct {
		name, valid string
		wantKept    bool
	}{
		{"the attachment listed by container and interface is kept", `[{"containerID":"c1","ifname":"eth0"}]`, true},
		{"the attachment is collected when its container is listed under another interface only", `[{"containerID":"c1","ifname":"net1"}]`, false},
		{"a container listed without an interface keeps every interface", `[{"containerID":"c1"}]`, true},
		{"the attachment is collected when another container is listed", `[{"containerID":"c2","ifname":"eth0"}]`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDelegate(t, resultWithAddress)
			if _, err := d.serve(t, CmdAdd, "eth0", "", webConf); err != nil {
				t.Fatal(err)
			}
			if err := d.gc(t, tc.valid); err != nil {
				t.Fatalf("GC: %v", err)
			}
			res, err := d.c.CachedResult("c1", "web", "eth0")
			if err != nil {
				t.Fatal(err)
			}
			deleted := strings.Contains(d.calls(t), "DEL c1 eth0")
			if kept := res != nil && !deleted; kept != tc.wantKept {
				t.Fatalf("after GC the attachment c1/eth0 is kept: %v (cached %v, the delegate saw %q), want %v", kept, res != nil, d.calls(t), tc.wantKept)
			}
		})
	}
}

// The bridge plugin's CHECK runs an IPAM plugin even when its config
// names none, and fails: on an L2-only network that is no verdict.
func TestServeCheckOfAnL2OnlyNetworkWhosePluginAsksForIPAM(t *testing.T) {
	const noIPAM = `{"code":999,"msg":"no plugin name provided"}`
	for _, tc := range []struct {
		name, plugin string
		wantHealthy  bool
	}{
		{"without IPAM, the failure is the plugin's bug: healthy", `{"type":"scripted"}`, true},
		{"with IPAM, the same failure is a verdict (the plugin's error)", `{"type":"scripted","ipam":{"type":"host-local"}}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := newDelegateOf(t, resultL2Only, tc.plugin, noIPAM)
			if _, err := d.serve(t, CmdAdd, "eth0", "", webConf); err != nil {
				t.Fatal(err)
			}
			_, err := d.serve(t, CmdCheck, "eth0", "", webConf)
			if healthy := err == nil; healthy != tc.wantHealthy || !healthy && !errors.Is(err, cninet.ErrCheckFailed) {
				t.Fatalf("CHECK: %v, want healthy %v", err, tc.wantHealthy)
			}
		})
	}
}
