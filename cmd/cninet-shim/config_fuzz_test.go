package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/internal/thickwire"
)

// shimCommands are the commands whose config the shim reads.
var shimCommands = []string{thickwire.CmdAdd, thickwire.CmdDel, thickwire.CmdCheck, thickwire.CmdStatus, thickwire.CmdGC}

// FuzzConfig: no stdin makes the shim's config reader panic. A refusal
// is a CNI error, 6 when stdin is no JSON object or a key the shim reads
// is no string, 7 naming the "socket", "timeout" or "cninet" key
// otherwise, and the same for every command. What it accepts is what the
// shim may act on: a clean absolute socket (the default when none is
// named), a clean absolute cninet or none, a deadline above zero (the
// "timeout" when one is named, else the command's default) and a silence
// limit above zero and at most the deadline.
func FuzzConfig(f *testing.F) {
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"web","type":"cninet-shim"}`))
	f.Add([]byte(`{"cniVersion":"1.0.0","name":"web","type":"cninet-shim","socket":"/run/cninet/cninet.sock","owner":"nomad","timeout":"45s","cninet":"/usr/local/bin/cninet"}`))
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"web","socket":"run/cninet.sock"}`))
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"web","socket":"/run/cninet/../cninet//x.sock"}`))
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"web","cninet":"/usr/local/bin/"}`))
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"web","cninet":"cninet"}`))
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"web","timeout":"1ms"}`))
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"web","timeout":"-1s"}`))
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"web","timeout":"soon"}`))
	f.Add([]byte(`{"cniVersion":"1.1.0","name":"web","socket":5}`))
	f.Add([]byte(`{"cniVersion":"0.4.0","name":"web","prevResult":{"cniVersion":"0.4.0","ips":[]},"runtimeConfig":{"portMappings":[{"hostPort":8080}]}}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`[]`))
	f.Fuzz(func(t *testing.T, stdin []byte) {
		conf, err := readConfig(stdin, thickwire.CmdAdd)
		for _, command := range shimCommands[1:] {
			if _, cerr := readConfig(stdin, command); (cerr == nil) != (err == nil) {
				t.Fatalf("%s: %v, but ADD: %v; want the same verdict for every command", command, cerr, err)
			}
		}
		var fields struct{ Socket, Timeout, Cninet any }
		decodes := json.Unmarshal(stdin, &fields) == nil
		if err != nil {
			assertConfigRefusal(t, stdin, err, decodes, fields.Socket, fields.Timeout, fields.Cninet)
			return
		}
		for _, command := range shimCommands {
			conf, _ := readConfig(stdin, command)
			assertActionable(t, conf, command, fields.Socket, fields.Timeout)
		}
		if conf.cninet != "" && filepath.Clean(conf.cninet) != conf.cninet {
			t.Fatalf("cninet %q accepted, want a clean absolute path", conf.cninet)
		}
	})
}

// assertConfigRefusal wants err to be the CNI error the runtime can act
// on: 6 for stdin that is no JSON object or whose keys are not strings,
// else 7 naming the key at fault.
func assertConfigRefusal(t *testing.T, stdin []byte, err *cniError, decodes bool, keys ...any) {
	t.Helper()
	if err.Msg == "" {
		t.Fatalf("refusal %+v has no message", err)
	}
	strs := true
	for _, k := range keys {
		if _, ok := k.(string); !ok && k != nil {
			strs = false
		}
	}
	if !decodes || !strs {
		if err.Code != codeDecodingFailure {
			t.Fatalf("stdin %q answered %+v, want code 6", stdin, err)
		}
		return
	}
	if err.Code != codeInvalidNetworkConfig || !(strings.Contains(err.Msg, "socket") || strings.Contains(err.Msg, `"timeout"`) || strings.Contains(err.Msg, `"cninet"`)) {
		t.Fatalf("refusal %+v, want code 7 naming the socket, the \"timeout\" or \"cninet\"", err)
	}
}

// assertActionable wants what readConfig accepted for command to be
// usable as it is: a socket to dial and limits to wait by.
func assertActionable(t *testing.T, conf *config, command string, socket, timeout any) {
	t.Helper()
	named, _ := socket.(string)
	if !filepath.IsAbs(conf.socket) || filepath.Clean(conf.socket) != conf.socket || (named == "" && conf.socket != thickwire.DefaultSocket) || (named != "" && conf.socket != named) {
		t.Fatalf("config socket %q read as %q, want it (clean, absolute), or %s when none", named, conf.socket, thickwire.DefaultSocket)
	}
	want := thickwire.DefaultTimeout
	if command == thickwire.CmdCheck || command == thickwire.CmdStatus {
		want = thickwire.DefaultProbeTimeout
	}
	if s, _ := timeout.(string); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("accepted \"timeout\" %q: %v", s, err)
		}
		want = d
	}
	if l := conf.limits; l.Timeout != want || l.Timeout <= 0 || l.Silence <= 0 || l.Silence > l.Timeout || l.Silence > thickwire.SilenceLimit {
		t.Fatalf("%s with \"timeout\" %v: limits %+v, want a deadline of %s and a silence limit within it and %s", command, timeout, l, want, thickwire.SilenceLimit)
	}
}

// FuzzCleanAbs: the shim tells a clean absolute path as filepath does,
// and offers the one filepath.Clean("/"+p) makes of another.
func FuzzCleanAbs(f *testing.F) {
	for _, p := range []string{"", "/", "a", "/a/b", "//a//b/", "/a/./b/../c", "../..", "a/..", "/..", "./x/", "/a/b/.."} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if got, want := cleanAbs(p), filepath.Clean("/"+p); got != want {
			t.Fatalf("cleanAbs(%q) = %q, want %q", p, got, want)
		}
		if got, want := isCleanAbs(p), filepath.IsAbs(p) && filepath.Clean(p) == p; got != want {
			t.Fatalf("isCleanAbs(%q) = %v, want %v", p, got, want)
		}
	})
}
