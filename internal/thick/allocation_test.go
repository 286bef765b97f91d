package thick

import (
	"errors"
	"fmt"
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
	if alloc.ID != "c1" || len(alloc.Args) != 2 || alloc.Args["K8S_POD_NAME"] != "web-0" || alloc.Args["NOMAD_ALLOC"] != "abc" {
		t.Errorf("args %v: want K8S_POD_NAME and NOMAD_ALLOC, without IgnoreUnknown", alloc.Args)
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
	}{
		{"an arg without = is refused", "K8S_POD_NAME", nil},
		{"an arg with an empty key is refused", "=v", nil},
		{"port mappings that are not a list are refused", "", map[string]any{"portMappings": "8080:80"}},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Allocation(&Request{ContainerID: "c1", Args: tc.args}, &NetConf{Name: "web", RuntimeConfig: tc.rc})
			if !errors.Is(err, ErrBadRequest) {
				t.Fatalf("got %v, want ErrBadRequest", err)
			}
		})
	}
}
