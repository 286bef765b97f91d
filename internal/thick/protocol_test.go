package thick

import (
	"bytes"
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// reqBody is a request of the current protocol, as the shim sends it.
func reqBody(command, id, netns, ifName, config string) string {
	return `{"protocol":1,"command":"` + command + `","containerID":"` + id + `","netns":"` + netns + `","ifName":"` + ifName + `","config":` + config + `}`
}

const shimConf = `{"cniVersion":"1.1.0","name":"web","type":"cninet-shim","runtimeConfig":{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]}}`

func TestDecodeRequest(t *testing.T) {
	cases := []struct {
		name, body string
		wantCode   uint // 0: valid
	}{
		{"an ADD with id, netns, ifname and a named config is valid", reqBody("ADD", "c1", "/run/netns/w", "eth0", shimConf), 0},
		{"a DEL without a netns is valid (the namespace may be gone)", reqBody("DEL", "c1", "", "eth0", shimConf), 0},
		{"a STATUS needs neither id nor netns", `{"command":"STATUS","config":` + shimConf + `}`, 0},
		{"a GC with valid attachments is valid", `{"command":"GC","config":{"cniVersion":"1.1.0","name":"web","cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"}]}}`, 0},
		{"malformed JSON is a decoding failure", `{"command":`, types.ErrDecodingFailure},
		{"two JSON values are a decoding failure", reqBody("DEL", "c1", "", "eth0", shimConf) + `{}`, types.ErrDecodingFailure},
		{"an unknown field is a decoding failure", `{"command":"ADD","bogus":1,"config":{}}`, types.ErrDecodingFailure},
		{"a config that is not an object is a decoding failure", `{"command":"ADD","config":"web"}`, types.ErrDecodingFailure},
		{"an unknown command is refused", reqBody("EXPLODE", "c1", "/run/netns/w", "eth0", shimConf), types.ErrInvalidEnvironmentVariables},
		{"a container id with ../ is refused", reqBody("ADD", "../../etc", "/run/netns/w", "eth0", shimConf), types.ErrInvalidEnvironmentVariables},
		{"an empty container id is refused", reqBody("DEL", "", "", "eth0", shimConf), types.ErrInvalidEnvironmentVariables},
		{"an interface name with a slash is refused", reqBody("ADD", "c1", "/run/netns/w", "eth/0", shimConf), types.ErrInvalidEnvironmentVariables},
		{"an interface name over 15 bytes is refused", reqBody("ADD", "c1", "/run/netns/w", "eth0123456789012", shimConf), types.ErrInvalidEnvironmentVariables},
		{"a relative netns on ADD is refused", reqBody("ADD", "c1", "netns/w", "eth0", shimConf), types.ErrInvalidEnvironmentVariables},
		{"a netns with .. on CHECK is refused", reqBody("CHECK", "c1", "/run/netns/../w", "eth0", shimConf), types.ErrInvalidEnvironmentVariables},
		{"a network name with a slash is refused", reqBody("ADD", "c1", "/run/netns/w", "eth0", `{"cniVersion":"1.0.0","name":"../web"}`), types.ErrInvalidEnvironmentVariables},
		{"a config without a network name is refused", reqBody("ADD", "c1", "/run/netns/w", "eth0", `{"cniVersion":"1.0.0"}`), types.ErrInvalidEnvironmentVariables},
		{"a GC naming a hostile valid attachment is refused", `{"command":"GC","config":{"cniVersion":"1.1.0","name":"web","cni.dev/valid-attachments":[{"containerID":"../x"}]}}`, types.ErrInvalidEnvironmentVariables},
		{"a config without a cniVersion is an incompatible version", reqBody("ADD", "c1", "/run/netns/w", "eth0", `{"name":"web"}`), types.ErrIncompatibleCNIVersion},
		{"a config of a CNI version thick mode does not serve is an incompatible version", reqBody("ADD", "c1", "/run/netns/w", "eth0", `{"cniVersion":"0.2.0","name":"web"}`), types.ErrIncompatibleCNIVersion},
		{"a config of a CNI version from the future is an incompatible version", reqBody("DEL", "c1", "", "eth0", `{"cniVersion":"9.0.0","name":"web"}`), types.ErrIncompatibleCNIVersion},
		{"a CHECK of a config before 0.4.0 is an incompatible version", reqBody("CHECK", "c1", "/run/netns/w", "eth0", `{"cniVersion":"0.3.1","name":"web"}`), types.ErrIncompatibleCNIVersion},
		{"a CHECK of a 0.4.0 config is valid", reqBody("CHECK", "c1", "/run/netns/w", "eth0", `{"cniVersion":"0.4.0","name":"web"}`), 0},
		{"a GC of a config before 1.1.0 is an incompatible version", `{"command":"GC","config":{"cniVersion":"1.0.0","name":"web"}}`, types.ErrIncompatibleCNIVersion},
		{"a STATUS of a config before 1.1.0 is an incompatible version", `{"command":"STATUS","config":{"cniVersion":"1.0.0","name":"web"}}`, types.ErrIncompatibleCNIVersion},
		{"a body past the size limit is refused", `{"command":"ADD","args":"` + strings.Repeat("a", MaxRequestBytes) + `"}`, types.ErrInvalidEnvironmentVariables},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, conf, err := DecodeRequest(strings.NewReader(tc.body))
			if tc.wantCode == 0 {
				if err != nil || req == nil || conf == nil || conf.Name != "web" {
					t.Fatalf("got %+v, %+v, %v; want a valid request of network web", req, conf, err)
				}
				return
			}
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("got %v, want an ErrBadRequest error", err)
			}
			if got := ErrorFor(err); got.Code != tc.wantCode || got.Msg == "" {
				t.Fatalf("CNI error %+v, want code %d with a message", got, tc.wantCode)
			}
		})
	}
}

// FuzzDecodeRequest: no input makes the decoder panic; every refusal
// wraps ErrBadRequest and is a CNI error with a message; whatever it
// accepts passes every check a command's handler relies on (the checks
// the decoder promises, asked again of the decoded request), and decodes
// the same once re-encoded, so a request the shim relays or logs means
// what the daemon served.
func FuzzDecodeRequest(f *testing.F) {
	f.Add([]byte(reqBody("ADD", "c1", "/run/netns/w", "eth0", shimConf)))
	f.Add([]byte(reqBody("CHECK", "c1", "/run/netns/w", "eth0", `{"cniVersion":"0.4.0","name":"web","prevResult":{"cniVersion":"0.4.0"}}`)))
	f.Add([]byte(reqBody("DEL", "c.1_x-y", "", "eth0", `{"cniVersion":"1.0.0","name":"web","owner":"nomad"}`)))
	f.Add([]byte(`{"command":"GC","config":{"cniVersion":"1.1.0","name":"web","cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"}]}}`))
	f.Add([]byte(`{"command":"STATUS","owner":"crio","config":{"name":"x","cniVersion":"1.1.0"}}`))
	f.Add([]byte(`{"protocol":1,"command":"ADD","containerID":"c1","netns":"/run/netns/w","ifName":"eth0","ackBy":"2026-01-02T03:04:05.5+01:00","deadline":"2026-01-02T03:06:05Z","config":{"cniVersion":"1.1.0","name":"web"}}`))
	f.Add([]byte(reqBody("CHECK", "c1", "/run/netns/../w", "eth0", shimConf)))
	f.Add([]byte(`{"command":"GC","owner":"a b","config":{"cniVersion":"1.1.0","name":"web"}}`))
	f.Add([]byte(`{"command":`))
	f.Fuzz(func(t *testing.T, body []byte) {
		req, conf, err := DecodeRequest(bytes.NewReader(body))
		if err != nil {
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("error %v does not wrap ErrBadRequest", err)
			}
			if cerr := ErrorFor(err); cerr.Code == 0 || cerr.Msg == "" {
				t.Fatalf("refusal %v is CNI error %+v, want a code and a message", err, cerr)
			}
			return
		}
		assertServable(t, req, conf)
		again, err := json.Marshal(req)
		if err != nil {
			t.Fatalf("an accepted request does not re-encode: %v", err)
		}
		req2, conf2, err := DecodeRequest(bytes.NewReader(again))
		if err != nil {
			t.Fatalf("the accepted request re-encoded as %s is refused: %v", again, err)
		}
		if twice, _ := json.Marshal(req2); !bytes.Equal(twice, again) {
			t.Fatalf("re-encoding changed the request:\n%s\n%s", again, twice)
		}
		if req2.Command != req.Command || conf2.Name != conf.Name || conf2.CNIVersion != conf.CNIVersion || OwnerOf(req2, conf2) != OwnerOf(req, conf) {
			t.Fatalf("re-decoded %+v %+v, want %+v %+v", req2, conf2, req, conf)
		}
	})
}

// assertServable asks again, of an accepted request, every check
// DecodeRequest promises.
func assertServable(t *testing.T, req *Request, conf *NetConf) {
	t.Helper()
	if err := CheckCNIVersion(req.Command, conf.CNIVersion); err != nil {
		t.Fatalf("accepted a config its command cannot carry: %v", err)
	}
	if conf.Name == "" || conf.Name == "." || conf.Name == ".." || strings.ContainsAny(conf.Name, "/\\\x00") {
		t.Fatalf("accepted network name %q", conf.Name)
	}
	if err := errors.Join(CheckOwner(conf.Owner), CheckOwner(req.Owner)); err != nil {
		t.Fatalf("accepted an owner that is no name: %v", err)
	}
	switch req.Command {
	case CmdAdd, CmdCheck, CmdDel:
		if !footprint.IsContainerID(req.ContainerID) {
			t.Fatalf("accepted container id %q", req.ContainerID)
		}
		if err := cninet.CheckIfName(req.IfName); err != nil {
			t.Fatalf("accepted interface name %q: %v", req.IfName, err)
		}
		if req.Command != CmdDel && (!filepath.IsAbs(req.NetNS) || filepath.Clean(req.NetNS) != req.NetNS) {
			t.Fatalf("accepted netns %q for %s", req.NetNS, req.Command)
		}
	case CmdStatus, CmdGC:
		for _, a := range conf.ValidAttachments {
			if !footprint.IsContainerID(a.ContainerID) || (a.IfName != "" && cninet.CheckIfName(a.IfName) != nil) {
				t.Fatalf("accepted valid attachment %+v", a)
			}
		}
	default:
		t.Fatalf("accepted command %q", req.Command)
	}
}

func TestTheOwnerOfARequest(t *testing.T) {
	tests := []struct {
		name      string
		confOwner string
		reqOwner  string
		want      string
	}{
		{"the shim config's owner wins", "nomad", "containerd", "nomad"},
		{"else the runtime the shim found", "", "containerd", "containerd"},
		{"else the daemon's own", "", "", Owner},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := OwnerOf(&Request{Owner: tt.reqOwner}, &NetConf{Owner: tt.confOwner}); got != tt.want {
				t.Errorf("OwnerOf = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCheckOwner(t *testing.T) {
	tests := []struct {
		name, owner string
		ok          bool
	}{
		{"none is no owner, and allowed", "", true},
		{"a runtime's executable name", "containerd", true},
		{"a name starting with a digit", "9p-runtime", true},
		{"dots, underscores, pluses and dashes inside", "a.b_c+d-e", true},
		{"64 bytes", strings.Repeat("a", 64), true},
		{"65 bytes", strings.Repeat("a", 65), false},
		{"a name starting with a dot", ".hidden", false},
		{"a name starting with a dash", "-x", false},
		{"a slash", "../x", false},
		{"a space", "a b", false},
		{"a letter outside ASCII", "crì", false},
		{"a trailing newline", "containerd\n", false},
		{"a NUL byte", "a\x00b", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := CheckOwner(tt.owner)
			if tt.ok && err != nil {
				t.Fatalf("CheckOwner(%q) = %v, want nil", tt.owner, err)
			}
			if !tt.ok && !errors.Is(err, ErrBadRequest) {
				t.Fatalf("CheckOwner(%q) = %v, want ErrBadRequest", tt.owner, err)
			}
		})
	}
}

func TestAnOwnerThatIsNoNameIsABadRequest(t *testing.T) {
	for _, body := range []string{
		`{"command":"GC","config":{"cniVersion":"1.1.0","name":"web","type":"cninet-shim","owner":"../x"}}`,
		`{"command":"GC","owner":"a b","config":{"cniVersion":"1.1.0","name":"web","type":"cninet-shim"}}`,
		`{"command":"GC","owner":"` + strings.Repeat("a", 65) + `","config":{"cniVersion":"1.1.0","name":"web","type":"cninet-shim"}}`,
	} {
		if _, _, err := DecodeRequest(strings.NewReader(body)); !errors.Is(err, ErrBadRequest) {
			t.Errorf("%s: %v, want ErrBadRequest", body, err)
		}
	}
	if _, conf, err := DecodeRequest(strings.NewReader(`{"command":"GC","owner":"containerd","config":{"cniVersion":"1.1.0","name":"web","type":"cninet-shim","owner":"nomad"}}`)); err != nil || conf.Owner != "nomad" {
		t.Fatalf("a good owner: %v, %+v", err, conf)
	}
}
