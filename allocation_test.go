package cninet_test

import (
	"errors"
	"reflect"
	"testing"

	cni "github.com/containerd/go-cni"
	"github.com/seed1280861d/cninet"
)

func pm(host, ctr int32, proto, ip string) cni.PortMapping {
	return cni.PortMapping{HostPort: host, ContainerPort: ctr, Protocol: proto, HostIP: ip}
}

func TestPortMappings(t *testing.T) {
	cases := []struct {
		name         string
		alloc        cninet.Allocation
		ignoreHostIP bool
		want         []cni.PortMapping
	}{
		{
			name:  "no ports gives an empty list",
			alloc: cninet.Allocation{ID: "a"},
			want:  []cni.PortMapping{},
		},
		{
			name:  "each group port is mapped for tcp then udp, with its host IP",
			alloc: cninet.Allocation{ID: "a", Ports: []cninet.Port{{Label: "http", Value: 8080, To: 80, HostIP: "198.18.0.1"}}},
			want:  []cni.PortMapping{pm(8080, 80, "tcp", "198.18.0.1"), pm(8080, 80, "udp", "198.18.0.1")},
		},
		{
			name:  "To below 1 maps to the host port",
			alloc: cninet.Allocation{ID: "a", Ports: []cninet.Port{{Value: 9000, To: 0}, {Value: 9001, To: -1}}},
			want:  []cni.PortMapping{pm(9000, 9000, "tcp", ""), pm(9000, 9000, "udp", ""), pm(9001, 9001, "tcp", ""), pm(9001, 9001, "udp", "")},
		},
		{
			name:         "IgnorePortMappingHostIP drops the host IP",
			alloc:        cninet.Allocation{ID: "a", Ports: []cninet.Port{{Value: 8080, To: 80, HostIP: "198.18.0.1"}}},
			ignoreHostIP: true,
			want:         []cni.PortMapping{pm(8080, 80, "tcp", ""), pm(8080, 80, "udp", "")},
		},
		{
			name: "group ports win over legacy networks",
			alloc: cninet.Allocation{ID: "a", Ports: []cninet.Port{{Value: 1000}},
				NetworkPorts: []cninet.NetworkPorts{{ReservedPorts: []cninet.Port{{Value: 2000}}}}},
			want: []cni.PortMapping{pm(1000, 1000, "tcp", ""), pm(1000, 1000, "udp", "")},
		},
		{
			name: "legacy networks map reserved then dynamic ports, without host IP",
			alloc: cninet.Allocation{ID: "a", NetworkPorts: []cninet.NetworkPorts{
				{ReservedPorts: []cninet.Port{{Value: 2000, To: 20, HostIP: "198.18.0.1"}}, DynamicPorts: []cninet.Port{{Value: 3000}}},
				{DynamicPorts: []cninet.Port{{Value: 4000}}},
			}},
			want: []cni.PortMapping{pm(2000, 20, "tcp", ""), pm(2000, 20, "udp", ""), pm(3000, 3000, "tcp", ""), pm(3000, 3000, "udp", ""), pm(4000, 4000, "tcp", ""), pm(4000, 4000, "udp", "")},
		},
		{
			name:  "a port that names a protocol is mapped for that protocol only",
			alloc: cninet.Allocation{ID: "a", Ports: []cninet.Port{{Value: 53, Protocol: "udp"}, {Value: 53, Protocol: "tcp", To: 5353}}},
			want:  []cni.PortMapping{pm(53, 53, "udp", ""), pm(53, 5353, "tcp", "")},
		},
		{
			name:  "an sctp port is mapped for sctp only",
			alloc: cninet.Allocation{ID: "a", Ports: []cninet.Port{{Value: 3868, Protocol: "sctp"}}},
			want:  []cni.PortMapping{pm(3868, 3868, "sctp", "")},
		},
		{
			name:  "the same host port on two host IPs is two mappings",
			alloc: cninet.Allocation{ID: "a", Ports: []cninet.Port{{Value: 80, HostIP: "198.18.0.1"}, {Value: 80, HostIP: "198.18.0.2"}}},
			want:  []cni.PortMapping{pm(80, 80, "tcp", "198.18.0.1"), pm(80, 80, "udp", "198.18.0.1"), pm(80, 80, "tcp", "198.18.0.2"), pm(80, 80, "udp", "198.18.0.2")},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := cninet.PortMappings(&tc.alloc, tc.ignoreHostIP)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got  %+v\nwant %+v", got, tc.want)
			}
		})
	}
}

func TestPortMappingsRejects(t *testing.T) {
	cases := map[string]cninet.Allocation{
		"host port 0":                                 {Ports: []cninet.Port{{Value: 0}}},
		"host port above 65535":                       {Ports: []cninet.Port{{Value: 65536}}},
		"container port above 65535":                  {Ports: []cninet.Port{{Value: 80, To: 70000}}},
		"an unparsable host IP":                       {Ports: []cninet.Port{{Value: 80, HostIP: "nope"}}},
		"a protocol portmap does not map":             {Ports: []cninet.Port{{Value: 80, Protocol: "icmp"}}},
		"the same host port twice":                    {Ports: []cninet.Port{{Value: 80}, {Value: 80, To: 8080}}},
		"the same host port once per legacy net":      {NetworkPorts: []cninet.NetworkPorts{{ReservedPorts: []cninet.Port{{Value: 80}}}, {DynamicPorts: []cninet.Port{{Value: 80}}}}},
		"the same port and IP once the IP is ignored": {Ports: []cninet.Port{{Value: 80, HostIP: "198.18.0.1"}, {Value: 80}}},
	}
	for name, alloc := range cases {
		t.Run(name, func(t *testing.T) {
			ignore := name == "the same port and IP once the IP is ignored"
			if _, err := cninet.PortMappings(&alloc, ignore); !errors.Is(err, cninet.ErrInvalidAllocation) {
				t.Fatalf("err = %v, want ErrInvalidAllocation", err)
			}
		})
	}
	if _, err := cninet.PortMappings(nil, false); !errors.Is(err, cninet.ErrInvalidAllocation) {
		t.Fatalf("nil allocation: err = %v, want ErrInvalidAllocation", err)
	}
}

func TestPortMappingsNeverMutatesTheCallersSlices(t *testing.T) {
	reserved := make([]cninet.Port, 1, 4) // spare capacity an append would write into
	reserved[0] = cninet.Port{Value: 2000}
	dynamic := []cninet.Port{{Value: 3000, To: 0}}
	alloc := &cninet.Allocation{ID: "a", NetworkPorts: []cninet.NetworkPorts{{ReservedPorts: reserved, DynamicPorts: dynamic}}}
	if _, err := cninet.PortMappings(alloc, false); err != nil {
		t.Fatal(err)
	}
	if got := reserved[:cap(reserved)][1]; got != (cninet.Port{}) {
		t.Fatalf("spare capacity of ReservedPorts was written: %+v", got)
	}
	if dynamic[0].To != 0 {
		t.Fatalf("DynamicPorts[0].To changed to %d", dynamic[0].To)
	}
}
