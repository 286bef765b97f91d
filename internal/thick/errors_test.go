package thick

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/seed1280861d/cninet"
)

func TestErrorFor(t *testing.T) {
	plugin := &types.Error{Code: 123, Msg: "bridge says no", Details: "d"}
	cases := []struct {
		name     string
		err      error
		wantCode uint
		wantMsg  string // "" : the error's own text
	}{
		{"a delegate plugin's error keeps its code and message through cninet's wrapping",
			fmt.Errorf("%w: allocation a: %w", cninet.ErrSetupFailed, plugin), 123, "bridge says no"},
		{"an unknown network is an invalid network config", fmt.Errorf("%w: no network", cninet.ErrNetworkNotFound), types.ErrInvalidNetworkConfig, ""},
		{"a missing plugin is an invalid network config", fmt.Errorf("%w: bridge", cninet.ErrPluginMissing), types.ErrInvalidNetworkConfig, ""},
		{"a missing netns is an invalid environment", fmt.Errorf("%w: %w: gone", cninet.ErrInvalidArgument, cninet.ErrNoNetNS), types.ErrInvalidEnvironmentVariables, ""},
		{"not ready is plugin not available", fmt.Errorf("%w: bridge missing", cninet.ErrNotReady), types.ErrPluginNotAvailable, ""},
		{"a busy daemon is try again later", fmt.Errorf("%w: draining", ErrBusy), types.ErrTryAgainLater, ""},
		{"a deadline is try again later", context.DeadlineExceeded, types.ErrTryAgainLater, ""},
		{"an existing attachment has its own code", fmt.Errorf("%w: eth0", cninet.ErrAlreadyAttached), CodeAlreadyAttached, ""},
		{"an unhealthy attachment has its own code", fmt.Errorf("%w: x", cninet.ErrCheckFailed), CodeCheckFailed, ""},
		{"an incomplete cleanup has its own code", fmt.Errorf("%w: x", cninet.ErrCleanupFailed), CodeCleanupFailed, ""},
		{"anything else is internal", errors.New("surprise"), types.ErrInternal, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := ErrorFor(tc.err)
			want := tc.wantMsg
			if want == "" {
				want = tc.err.Error()
			}
			if got.Code != tc.wantCode || got.Msg != want {
				t.Fatalf("got code %d msg %q, want %d %q", got.Code, got.Msg, tc.wantCode, want)
			}
		})
	}
	if ErrorFor(nil) != nil {
		t.Fatal("ErrorFor(nil) is not nil")
	}
}

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
