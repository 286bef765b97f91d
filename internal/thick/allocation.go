package thick

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/seed1280861d/cninet"
)

// portMapping is one entry of the portMappings capability as runtimes
// write it.
type portMapping struct {
	HostPort      int    `json:"hostPort"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"hostIP"`
}

// Allocation is the cninet.Allocation of a request: the runtime's
// container id, its CNI_ARGS exactly as sent (IgnoreUnknown only when
// the runtime sent it, with its value), its port mappings as Ports and
// every other runtimeConfig capability unchanged. Malformed args or port
// mappings are ErrBadRequest errors naming the entry.
func Allocation(req *Request, conf *NetConf) (*cninet.Allocation, error) {
	alloc := &cninet.Allocation{ID: req.ContainerID, ExactArgs: true}
	args, err := parseArgs(req.Args)
	if err != nil {
		return nil, err
	}
	alloc.Args = args
	for name, value := range conf.RuntimeConfig {
		if name != "portMappings" {
			if alloc.Capabilities == nil {
				alloc.Capabilities = map[string]any{}
			}
			alloc.Capabilities[name] = value
			continue
		}
		if alloc.Ports, err = ports(value); err != nil {
			return nil, err
		}
	}
	return alloc, nil
}

// parseArgs reads CNI_ARGS: key=value pairs separated by ';', each split
// at its first '=', so a value may hold '=' (a base64 value, say).
func parseArgs(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	args := map[string]string{}
	for _, pair := range strings.Split(s, ";") {
		if pair == "" {
			continue
		}
		k, v, ok := strings.Cut(pair, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%w: CNI_ARGS entry %q, want KEY=VALUE", ErrBadRequest, pair)
		}
		args[k] = v
	}
	return args, nil
}

// portProtocols are the protocols the portmap plugin maps.
var portProtocols = []string{"tcp", "udp", "sctp"}

// ports turns the portMappings capability into cninet Ports; a mapping
// without a protocol is TCP, as runtimes mean it, and a protocol's case
// does not matter ("SCTP" is sctp).
func ports(value any) ([]cninet.Port, error) {
	raw, err := json.Marshal(value)
	if err != nil {
		return nil, fmt.Errorf("%w: runtimeConfig.portMappings: %w", ErrBadRequest, err)
	}
	var mappings []portMapping
	if err := json.Unmarshal(raw, &mappings); err != nil {
		return nil, fmt.Errorf("%w: runtimeConfig.portMappings %s, want a list of {hostPort, containerPort, protocol, hostIP}: %w", ErrBadRequest, raw, err)
	}
	out := make([]cninet.Port, 0, len(mappings))
	for i, m := range mappings {
		proto := strings.ToLower(m.Protocol)
		if proto == "" {
			proto = "tcp"
		}
		if !slices.Contains(portProtocols, proto) {
			return nil, fmt.Errorf("%w: runtimeConfig.portMappings[%d] (host port %d) has protocol %q, want tcp, udp or sctp (any case; none is tcp)",
				ErrBadRequest, i, m.HostPort, m.Protocol)
		}
		out = append(out, cninet.Port{Label: fmt.Sprintf("%d/%s", m.HostPort, proto), Value: m.HostPort,
			To: m.ContainerPort, HostIP: m.HostIP, Protocol: proto})
	}
	return out, nil
}
