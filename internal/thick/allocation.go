package thick

import (
	"encoding/json"
	"fmt"
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
// container id, its CNI_ARGS (but IgnoreUnknown, which cninet always
// sends), its port mappings as Ports and every other runtimeConfig
// capability unchanged. Malformed args or port mappings are ErrBadRequest
// errors naming the entry.
func Allocation(req *Request, conf *NetConf) (*cninet.Allocation, error) {
	alloc := &cninet.Allocation{ID: req.ContainerID}
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

// parseArgs reads CNI_ARGS: key=value pairs separated by ';'.
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
		if strings.EqualFold(k, "IgnoreUnknown") {
			continue
		}
		args[k] = v
	}
	return args, nil
}

// ports turns the portMappings capability into cninet Ports; a mapping
// without a protocol is TCP, as runtimes mean it.
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
	for _, m := range mappings {
		proto := strings.ToLower(m.Protocol)
		if proto == "" {
			proto = "tcp"
		}
		out = append(out, cninet.Port{Label: fmt.Sprintf("%d/%s", m.HostPort, proto), Value: m.HostPort,
			To: m.ContainerPort, HostIP: m.HostIP, Protocol: proto})
	}
	return out, nil
}
