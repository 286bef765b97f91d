package thick

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet"
)

func TestAllocation(t *testing.T) {
	conf := &NetConf{Name: "web", RuntimeConfig: map[string]any{
		"portMappings": []any{map[string]any{"hostPort": 8080.0, "containerPort": 80.0, "protocol": "TCP"}, map[string]any{"hostPort": 53.0, "containerPort": 53.0}},
		"bandwidth":    map[string]any{"ingressRate": 1000.0},
		"mac":          "02:00:00:00:00:01",
	}}
	req := &Request{ContainerID: "c1", Args: "IgnoreUnknown=1;K8S_POD_NAME=web-0;;NOMAD_ALLOC=abc"}
	alloc, err := Allocation(req, conf)
	if err != nil {
		t.Fatal(err)
	}
	want := []cninet.Port{{Label: "8080/tcp", Value: 8080, To: 80, Protocol: "tcp"}, {Label: "53/tcp", Value: 53, To: 53, Protocol: "tcp"}}
	if fmt.Sprint(alloc.Ports) != fmt.Sprint(want) {
		t.Errorf("ports %+v, want %+v (protocols lower-cased, none meaning tcp)", alloc.Ports, want)
	}
	if len(alloc.Capabilities) != 2 || alloc.Capabilities["mac"] != "02:00:00:00:00:01" || alloc.Capabilities["bandwidth"] == nil {
		t.Errorf("capabilities %v, want bandwidth and mac unchanged", alloc.Capabilities)
	}

	bad := []struct {
		name, args string
		rc         map[string]any
		wantMsg    string
	}{
		{"an arg without = is refused", "K8S_POD_NAME", nil, "K8S_POD_NAME"},
		{"an arg with an empty key is refused", "=v", nil, "=v"},
		{"port mappings that are not a list are refused", "", map[string]any{"portMappings": "8080:80"}, "portMappings"},
		{"a protocol portmap does not map is refused, naming the mapping", "",
			map[string]any{"portMappings": []any{map[string]any{"hostPort": 80.0, "containerPort": 80.0}, map[string]any{"hostPort": 81.0, "containerPort": 81.0, "protocol": "icmp"}}},
			`portMappings[1] (host port 81) has protocol "icmp", want tcp, udp or sctp`},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Allocation(&Request{ContainerID: "c1", Args: tc.args}, &NetConf{Name: "web", RuntimeConfig: tc.rc})
			if !errors.Is(err, ErrBadRequest) || !strings.Contains(fmt.Sprint(err), tc.wantMsg) {
				t.Fatalf("got %v, want ErrBadRequest naming %q", err, tc.wantMsg)
			}
		})
	}
}

func TestAllocationArgs(t *testing.T) {
	for _, tc := range []struct {
		name, args string
		want       map[string]string
	}{
		{"the runtime's IgnoreUnknown is passed on with its value", "IgnoreUnknown=1;K8S_POD_NAME=web-0;;NOMAD_ALLOC=abc",
			map[string]string{"IgnoreUnknown": "1", "K8S_POD_NAME": "web-0", "NOMAD_ALLOC": "abc"}},
		{"no IgnoreUnknown is added when the runtime sent none", "K8S_POD_NAME=web-0",
			map[string]string{"K8S_POD_NAME": "web-0"}},
		{"an IgnoreUnknown of another spelling and value is kept as sent", "ignoreunknown=false;A=b",
			map[string]string{"ignoreunknown": "false", "A": "b"}},
		{"a value holding '=' splits at the first '=' only", "TOKEN=a2V5=dmFs==;K=v",
			map[string]string{"TOKEN": "a2V5=dmFs==", "K": "v"}},
		{"no args are none", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			alloc, err := Allocation(&Request{ContainerID: "c1", Args: tc.args}, &NetConf{Name: "web"})
			if err != nil {
				t.Fatal(err)
			}
			if !alloc.ExactArgs || !reflect.DeepEqual(alloc.Args, tc.want) {
				t.Fatalf("args %v (exact %v), want %v sent exactly", alloc.Args, alloc.ExactArgs, tc.want)
			}
		})
	}
}

func TestAllocationPortProtocols(t *testing.T) {
	for _, tc := range []struct{ name, protocol, want string }{
		{"none is tcp", "", "tcp"},
		{"tcp", "tcp", "tcp"},
		{"UDP in capitals is udp", "UDP", "udp"},
		{"sctp", "sctp", "sctp"},
		{"SCTP in capitals is sctp", "SCTP", "sctp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc := map[string]any{"portMappings": []any{map[string]any{"hostPort": 3868.0, "containerPort": 3868.0, "protocol": tc.protocol}}}
			alloc, err := Allocation(&Request{ContainerID: "c1"}, &NetConf{Name: "web", RuntimeConfig: rc})
			if err != nil {
				t.Fatal(err)
			}
			if len(alloc.Ports) != 1 || alloc.Ports[0].Protocol != tc.want {
				t.Fatalf("ports %+v, want one %s mapping", alloc.Ports, tc.want)
			}
			if _, err := cninet.PortMappings(alloc, false); err != nil {
				t.Fatalf("cninet refuses the mapping: %v", err)
			}
		})
	}
}
