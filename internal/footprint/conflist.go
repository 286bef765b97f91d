package footprint

import "encoding/json"

// Plugin is one plugin of a conflist: its type and its configuration.
type Plugin struct {
	Type  string
	Bytes []byte
}

// configurer is a footprint that reads, from a network's plugins, where
// its plugin keeps state for the network's attachments.
type configurer interface {
	configure(n *Network)
}

// NetworkOf returns what the cleaner must know about the network a
// conflist defines: its plugins, and what each footprint reads from them
// (host-local's reservation directories, portmap's backend, …). IfName,
// IfNames and CacheDir are the caller's.
func NetworkOf(name string, plugins []Plugin) Network {
	n := Network{Name: name, Plugins: plugins}
	for _, fp := range footprints {
		if c, ok := fp.(configurer); ok {
			c.configure(&n)
		}
	}
	return n
}

// configs returns the configurations of the network's plugins of type
// typ, decoded into T; a plugin whose configuration does not decode is
// passed over.
func configs[T any](n Network, typ string) []T {
	var out []T
	for _, p := range n.Plugins {
		var conf T
		if (typ == "" || p.Type == typ) && json.Unmarshal(p.Bytes, &conf) == nil {
			out = append(out, conf)
		}
	}
	return out
}

// runs reports whether the network's conflist runs a plugin of type typ.
func (n Network) runs(typ string) bool {
	for _, p := range n.Plugins {
		if p.Type == typ {
			return true
		}
	}
	return false
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func appendOnce(list []string, s string) []string {
	for _, have := range list {
		if have == s {
			return list
		}
	}
	return append(list, s)
}
