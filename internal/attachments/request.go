package attachments

import (
	"encoding/json"

	cni "github.com/containerd/go-cni"
	"github.com/containernetworking/cni/libcni"
	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/registry"
)

// Request is everything the plugins are told about one allocation. It is
// computed once per call and identical for Setup, Check and Teardown, because
// portmap's DEL removes nothing unless it sees the same portMappings.
type Request struct {
	ID       string
	Mappings []cni.PortMapping
	Args     [][2]string
	Caps     map[string]any // Allocation.Capabilities, validated
	// RuntimeID is the runtime's container id where ID is not it
	// (ConnectOptions.RuntimeID): the records name it.
	RuntimeID string
	// Networks are the networks the allocation names, in its order
	// (Allocation.NetworkNames; none: the default network).
	Networks []string
}

// opts returns the go-cni namespace options for this request.
func (a Request) opts() []cni.NamespaceOpts {
	opts := make([]cni.NamespaceOpts, 0, 1+len(a.Args))
	opts = append(opts, cni.WithCapabilityPortMap(a.Mappings))
	for name, value := range a.Caps {
		opts = append(opts, cni.WithCapability(name, value))
	}
	for _, kv := range a.Args {
		opts = append(opts, cni.WithArgs(kv[0], kv[1]))
	}
	return opts
}

// CachedRequest is req with the args and port mappings that libcni
// cached for a, where it cached them.
func CachedRequest(req Request, a *libcni.NetworkAttachment) Request {
	if len(a.CniArgs) > 0 {
		req.Args = a.CniArgs
	}
	if raw, ok := a.CapabilityArgs["portMappings"]; ok {
		var mappings []cni.PortMapping
		if b, err := json.Marshal(raw); err == nil && json.Unmarshal(b, &mappings) == nil {
			req.Mappings = mappings
		}
	}
	return req
}

// CachedCapabilities is req with the capability arguments besides port
// mappings that libcni cached for a, where it cached any: a DEL and a
// CHECK must tell the plugins what the ADD told them.
func CachedCapabilities(req Request, a *libcni.NetworkAttachment) Request {
	caps := map[string]any{}
	for name, value := range a.CapabilityArgs {
		if name != catalog.CapabilityPortMappings {
			caps[name] = value
		}
	}
	if len(caps) > 0 {
		req.Caps = caps
	}
	return req
}

// RecordedRequest is req with the args and capabilities rec says its
// ADD was given.
func RecordedRequest(req Request, rec registry.Record) Request {
	a := &libcni.NetworkAttachment{CniArgs: rec.Args, CapabilityArgs: map[string]any{}}
	for name, raw := range rec.Capabilities {
		var v any
		if json.Unmarshal(raw, &v) == nil {
			a.CapabilityArgs[name] = v
		}
	}
	return CachedCapabilities(CachedRequest(req, a), a)
}
