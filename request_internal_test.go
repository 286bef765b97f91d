package cninet

import (
	"errors"
	"math"
	"reflect"
	"testing"

	"github.com/containernetworking/cni/libcni"
	"github.com/seed1280861d/cninet/internal/attachments"
	"github.com/seed1280861d/cninet/internal/catalog"
)

func TestCNIArgsAreIgnoreUnknownThenSortedUserArgs(t *testing.T) {
	alloc := &Allocation{ID: "a", Args: map[string]string{"NOMAD_JOB_ID": "web", "NOMAD_ALLOC_ID": "a", "K8S_POD_NAME": "x"}}
	want := [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAME", "x"}, {"NOMAD_ALLOC_ID", "a"}, {"NOMAD_JOB_ID", "web"}}
	for i := 0; i < 20; i++ { // map iteration order varies; the args must not
		got, err := cniArgs(alloc)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

func TestCNIArgsCarry(t *testing.T) {
	for _, tt := range []struct {
		name  string
		alloc Allocation
		want  [][2]string
	}{
		{"a value containing '=' as it is, after cninet's IgnoreUnknown=1",
			Allocation{ID: "a", Args: map[string]string{"K8S_POD_UID": "a=b=c"}},
			[][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_UID", "a=b=c"}}},
		{"exact args without an IgnoreUnknown cninet would add",
			Allocation{ID: "a", ExactArgs: true, Args: map[string]string{"K8S_POD_NAME": "x"}},
			[][2]string{{"K8S_POD_NAME", "x"}}},
		{"exact args with the runtime's own IgnoreUnknown, its spelling and value kept",
			Allocation{ID: "a", ExactArgs: true, Args: map[string]string{"ignoreunknown": "true", "K8S_POD_NAME": "x"}},
			[][2]string{{"K8S_POD_NAME", "x"}, {"ignoreunknown", "true"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := cniArgs(&tt.alloc)
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestCNIArgsRejects(t *testing.T) {
	for name, args := range map[string]map[string]string{
		"an empty key":                                {"": "v"},
		"a key containing '='":                        {"A=B": "v"},
		"a key containing ';'":                        {"A;B": "v"},
		"a value containing ';'":                      {"A": "x;B=y"},
		"IgnoreUnknown, which is cninet's":            {"ignoreunknown": "0"},
		"a value containing ';' even with exact args": {"A": "x;B=y"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := cniArgs(&Allocation{ID: "a", Args: args}); !errors.Is(err, ErrInvalidAllocation) {
				t.Fatalf("err = %v, want ErrInvalidAllocation", err)
			}
		})
	}
}

func TestValidateCapabilities(t *testing.T) {
	cases := []struct {
		name string
		caps map[string]any
		ok   bool
	}{
		{"no capabilities are valid", nil, true},
		{"the well-known capabilities with JSON values are valid", map[string]any{CapabilityAliases: []string{"web"}, CapabilityIPs: []string{"198.18.0.9/24"},
			CapabilityMAC: "02:00:00:00:00:01", CapabilityBandwidth: map[string]int{"ingressRate": 1000}, CapabilityIPRanges: [][]map[string]string{{{"subnet": "198.18.1.0/24"}}},
			CapabilityDNS: map[string][]string{"servers": {"198.18.0.1"}}}, true},
		{"a capability a custom plugin declares is valid", map[string]any{"io.example/zone": "a"}, true},
		{"an empty name is refused", map[string]any{"": 1}, false},
		{"portMappings is refused: Ports gives it", map[string]any{"portMappings": []any{}}, false},
		{"a value JSON cannot carry is refused", map[string]any{CapabilityBandwidth: math.Inf(1)}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := ValidateCapabilities(tc.caps)
			if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrInvalidAllocation)) {
				t.Fatalf("got %v, want ok=%v (errors wrapping ErrInvalidAllocation)", err, tc.ok)
			}
		})
	}
}

// A network is told only the capabilities its conflist declares, port
// mappings included, whatever else the allocation carries.
func TestRuntimeConfPassesOnlyDeclaredCapabilities(t *testing.T) {
	list, err := libcni.ConfListFromBytes([]byte(`{"cniVersion":"1.0.0","name":"n","plugins":[
		{"type":"bridge"},{"type":"bandwidth","capabilities":{"bandwidth":true}},{"type":"portmap","capabilities":{"portMappings":true,"aliases":false}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	alloc := &Allocation{ID: "a1", Ports: []Port{{Value: 8080, Protocol: "tcp"}},
		Capabilities: map[string]any{CapabilityBandwidth: map[string]int{"ingressRate": 1}, CapabilityMAC: "02:00:00:00:00:01", CapabilityAliases: []string{"x"}}}
	req, err := newRequest(alloc, false)
	if err != nil {
		t.Fatal(err)
	}
	att := attachments.Attachment{Conf: catalog.NewConf(list), IfName: "eth1"}
	rt := attachments.LibDriver{}.RuntimeConf(req, att, "/proc/self/ns/net")
	if rt.IfName != "eth1" || len(rt.CapabilityArgs) != 2 || rt.CapabilityArgs["bandwidth"] == nil || rt.CapabilityArgs["portMappings"] == nil {
		t.Fatalf("runtime conf %+v: want eth1 with portMappings and bandwidth only (mac undeclared, aliases declared false)", rt)
	}
}
