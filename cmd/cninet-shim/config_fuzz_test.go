package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/seed1280861d/cninet/internal/thick"
)

// shimCommands are the commands whose config the shim reads.
var shimCommands = []string{thick.CmdAdd, thick.CmdDel, thick.CmdCheck, thick.CmdStatus, thick.CmdGC}

// FuzzConfig: no stdin makes the shim's config reader panic. A refusal
// is a CNI error, 6 when stdin is no JSON object, 7 naming the "socket"
// or "timeout" key otherwise, and the same for every command. What it
// accepts is what the shim may act on: a clean absolute socket (the default
// when none is named), a deadline above zero (the "timeout" when one is
// named, else the command's default) and a silence limit above zero and
// at most the deadline; and it reads the same once re-encoded.
func FuzzConfig(f *testing.F) {
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"web","type":"cninet-shim"}`))
	f.Add([]byte(`{"cniVersion":"1.0.0","name":"web","type":"cninet-shim","socket":"/run/cninet/cninet.sock","owner":"nomad","timeout":"45s"}`))
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"web","socket":"run/cninet.sock"}`))
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"web","socket":"/run/cninet/../cninet//x.sock"}`))
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"web","timeout":"1ms"}`))
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"web","timeout":"-1s"}`))
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"web","timeout":"soon"}`))
	f.Add([]byte(`{"cniVersion":"0.4.0","name":"web","prevResult":{"cniVersion":"0.4.0","ips":[]},"runtimeConfig":{"portMappings":[{"hostPort":8080}]}}`))
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"web","cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"}]}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, stdin []byte) {
		conf, socket, limits, err := config(&skel.CmdArgs{StdinData: stdin}, thick.CmdAdd)
		for _, command := range shimCommands[1:] {
			_, _, _, cerr := config(&skel.CmdArgs{StdinData: stdin}, command)
			if (cerr == nil) != (err == nil) {
				t.Fatalf("%s: %v, but ADD: %v; want the same verdict for every command", command, cerr, err)
			}
		}
		if err != nil {
			assertConfigRefusal(t, stdin, err)
			return
		}
		for _, command := range shimCommands {
			_, _, limits, _ := config(&skel.CmdArgs{StdinData: stdin}, command)
			assertActionable(t, conf, socket, command, limits)
		}
		again, err := json.Marshal(conf)
		if err != nil {
			t.Fatalf("an accepted config does not re-encode: %v", err)
		}
		conf2, socket2, limits2, err := config(&skel.CmdArgs{StdinData: again}, thick.CmdAdd)
		if err != nil {
			t.Fatalf("the accepted config re-encoded as %s is refused: %v", again, err)
		}
		if socket2 != socket || limits2 != limits || conf2.Owner != conf.Owner || conf2.Name != conf.Name || conf2.CNIVersion != conf.CNIVersion {
			t.Fatalf("re-encoded as %s it reads socket %q, limits %+v, %+v; want %q, %+v, %+v", again, socket2, limits2, conf2, socket, limits, conf)
		}
		if twice, _ := json.Marshal(conf2); !bytes.Equal(twice, again) {
			t.Fatalf("re-encoding changed the config:\n%s\n%s", again, twice)
		}
	})
}

// assertConfigRefusal wants err to be the CNI error the runtime can act
// on: 6 for stdin that is no JSON object, else 7 naming the key at fault.
func assertConfigRefusal(t *testing.T, stdin []byte, err error) {
	t.Helper()
	var cerr *types.Error
	if !errors.As(err, &cerr) || cerr.Msg == "" {
		t.Fatalf("refusal %v is no CNI error with a message", err)
	}
	var probe thick.NetConf
	if json.Unmarshal(stdin, &probe) != nil {
		if cerr.Code != types.ErrDecodingFailure {
			t.Fatalf("undecodable stdin answered %+v, want code 6", cerr)
		}
		return
	}
	if cerr.Code != types.ErrInvalidNetworkConfig || !(strings.Contains(cerr.Msg, "socket") || strings.Contains(cerr.Msg, `"timeout"`)) {
		t.Fatalf("refusal %+v, want code 7 naming the socket or the \"timeout\"", cerr)
	}
}

// assertActionable wants what config accepted for command to be usable
// as it is: a socket to dial and limits to wait by.
func assertActionable(t *testing.T, conf *thick.NetConf, socket, command string, limits thick.Limits) {
	t.Helper()
	if !filepath.IsAbs(socket) || filepath.Clean(socket) != socket || (conf.Socket == "" && socket != thick.DefaultSocket) || (conf.Socket != "" && socket != conf.Socket) {
		t.Fatalf("config socket %q read as %q, want it (clean, absolute), or %s when none", conf.Socket, socket, thick.DefaultSocket)
	}
	want := thick.DefaultShimTimeout
	if command == thick.CmdCheck || command == thick.CmdStatus {
		want = thick.DefaultProbeTimeout
	}
	if conf.Timeout != "" {
		d, err := time.ParseDuration(conf.Timeout)
		if err != nil {
			t.Fatalf("accepted \"timeout\" %q: %v", conf.Timeout, err)
		}
		want = d
	}
	if limits.Timeout != want || limits.Timeout <= 0 || limits.Silence <= 0 || limits.Silence > limits.Timeout || limits.Silence > thick.SilenceLimit {
		t.Fatalf("%s with \"timeout\" %q: limits %+v, want a deadline of %s and a silence limit within it and %s", command, conf.Timeout, limits, want, thick.SilenceLimit)
	}
}
