package footprint

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
)

// A live attachment's footprint is known twice: what Teardown must
// remove, and — from the same footprint files — what must be there while
// it lives. A drift check reads the host once (liveView) for every
// attachment it is given and asks each footprint what it expects
// (expecter); what is not there is Missing, each piece named, with how a
// repair can restore it.

// expecter is a footprint that knows what must be on the host while an
// attachment lives.
type expecter interface {
	// expect adds to h what of a's footprint the view lacks.
	expect(v *liveView, a *Live, h *Health)
}

// Restore says how a repair brings a missing piece back.
type Restore uint8

const (
	// ByPlugin: the plugin's own ADD writes it again (see Plan).
	ByPlugin Restore = iota + 1
	// ByCninet: cninet writes it, exactly as the plugin (or its library)
	// does: a file, the bridge plugin's masquerade rules.
	ByCninet
	// NotInPlace: it cannot be restored while the workload lives (its
	// namespace, interface or host-side device is gone; its address is
	// another attachment's now): the workload must be re-created.
	NotInPlace
)

// Missing is one piece of a live attachment's footprint that is not on
// the host.
type Missing struct {
	// Plugin is the plugin whose footprint it is ("bridge", "portmap",
	// "firewall", "host-local", "bandwidth"), or "libcni" for the cached
	// result and "workload" for the workload's namespace and interface.
	Plugin  string
	Kind    Kind
	Backend string // "iptables", "ip6tables", "nftables", "files" or "links"
	Detail  string
	Restore Restore
	// Why says, for NotInPlace, why it cannot be restored in place.
	Why string
}

// String names the missing piece for a person: its backend, kind and
// what it is.
func (m Missing) String() string {
	s := fmt.Sprintf("%s %s %s", m.Backend, m.Kind, m.Detail)
	if m.Why != "" {
		s += " (" + m.Why + ")"
	}
	return s
}

// Health is what a drift check found of one live attachment: nothing
// missing means it is whole.
type Health struct {
	Live    *Live
	Missing []Missing
	// Err says what could not be read: the check is incomplete, and what
	// it would have shown is not in Missing.
	Err  error
	errs []error
	// writes are how a batched repair writes the missing iptables pieces
	// it knows every word of (PlanRules), each naming its Missing.
	writes []ruleWrite
}

// Whole reports whether nothing is missing and the check was complete.
func (h *Health) Whole() bool { return len(h.Missing) == 0 && h.Err == nil }

// FirewallWhole reports whether the check was complete and found no
// firewall rule or chain missing.
func (h *Health) FirewallWhole() bool {
	return h.Err == nil && !slices.ContainsFunc(h.Missing, func(m Missing) bool {
		return m.Backend == "iptables" || m.Backend == "ip6tables" || m.Backend == "nftables"
	})
}

// InPlace reports whether a repair can restore everything missing.
func (h *Health) InPlace() bool {
	return !slices.ContainsFunc(h.Missing, func(m Missing) bool { return m.Restore == NotInPlace })
}

func (h *Health) miss(m Missing) { h.Missing = append(h.Missing, m) }

// missWritable adds m, which w writes again.
func (h *Health) missWritable(m Missing, w ruleWrite) {
	w.missing = len(h.Missing)
	h.Missing = append(h.Missing, m)
	h.writes = append(h.writes, w)
}

// Plugins returns the plugins whose own ADD a repair runs again, in the
// order of the network's conflist.
func (h *Health) Plugins() []string {
	var out []string
	for _, p := range h.Live.Net.Plugins {
		if !slices.Contains(out, p.Type) && slices.ContainsFunc(h.Missing, func(m Missing) bool {
			return m.Restore == ByPlugin && m.Plugin == p.Type
		}) {
			out = append(out, p.Type)
		}
	}
	return out
}

// Checker checks live attachments against the host, reading the host
// once for all of them. Build one per check.
type Checker struct {
	ctx  context.Context
	host Seams
	// Shallow leaves the devices out but for the namespace's existence
	// (a stat): firewall rules and files only, what a repair can restore.
	// The repair watcher's passes read no more.
	Shallow bool
	// FirewallUnchanged leaves the firewall out (iptables' and nftables'
	// rules and chains): the caller knows it is as a check that found it
	// whole left it. The repair watcher knows so when no nf_tables change
	// arrived since (host.NFTablesBacked).
	FirewallUnchanged bool
}

// NewChecker returns a checker of live attachments on host h; ctx bounds
// everything it reads.
func NewChecker(ctx context.Context, h Seams) *Checker { return &Checker{ctx: ctx, host: h} }

// Check returns the health of each of lives, in order, from one read of
// the host.
func (c *Checker) Check(lives []*Live) []Health {
	v := newLiveView(c.ctx, c.host)
	v.shallow, v.firewallUnchanged = c.Shallow, c.FirewallUnchanged
	out := make([]Health, len(lives))
	for i, a := range lives {
		out[i] = checkOne(v, a)
	}
	return out
}

// checkOne asks every footprint what a lacks.
func checkOne(v *liveView, a *Live) Health {
	h := Health{Live: a}
	for _, fp := range footprints {
		if e, ok := fp.(expecter); ok {
			e.expect(v, a, &h)
		}
	}
	workloadDevices{}.expect(v, a, &h)
	return h
}

// unknown records that what err names could not be read: the check is
// incomplete. The same error (a listing several pieces need) is kept
// once.
func (h *Health) unknown(err error) {
	if err == nil {
		return
	}
	for _, have := range h.errs {
		if have.Error() == err.Error() {
			return
		}
	}
	h.errs = append(h.errs, err)
	h.Err = errors.Join(h.errs...)
}

// joinDetails renders missing pieces for a log line or an error.
func joinDetails(ms []Missing) string {
	s := make([]string, len(ms))
	for i, m := range ms {
		s[i] = m.String()
	}
	return strings.Join(s, "; ")
}

// Live is one live attachment as its record tells it: what a drift check
// expects on the host (Checker) and what a repair restores. The caller
// builds it from the host registry's record and the ADD's result.
type Live struct {
	// Attachment is the network and the container id the plugins know
	// the attachment by.
	Attachment
	// IfName is the workload's interface; NetNS the namespace the ADD was
	// given.
	IfName, NetNS string
	// Net is the network as its recorded conflist defines it (NetworkOf),
	// with CacheDir set.
	Net Network
	// Backends are the backends the network's plugins really used, by
	// plugin type ("iptables" or "nftables"; none for a plugin without
	// one).
	Backends map[string]string
	// Uncached says the attachment's CNI keeps libcni's cache where cninet
	// does not look (an injected Config.CNI): it is not expected.
	Uncached bool
	// Result is what the ADD returned; nil when neither the record nor
	// libcni's cache holds it, and then only the cached result itself is
	// expected.
	Result *Result
	// Mappings are the runtime's port mappings (portmap is given them
	// where it declares the portMappings capability), and Capabilities
	// every capability argument (portMappings among them), as libcni
	// passed them.
	Mappings     []PortMapping
	Capabilities map[string]json.RawMessage
}

// Result is the part of a CNI result a check reads: the interfaces the
// plugins made and the addresses they gave.
type Result struct {
	Interfaces []ResultInterface
	IPs        []ResultIP
	// Raw is the result as JSON (libcni's cache keeps it so): what a
	// repair writes back when the cache file is gone.
	Raw json.RawMessage
}

// ResultInterface is one interface of a result.
type ResultInterface struct {
	Name, MAC, Sandbox string
}

// ResultIP is one address of a result and the interface it is on (-1:
// the result does not say).
type ResultIP struct {
	Addr      netip.Prefix
	Interface int
}

// PortMapping is one port mapping as the plugins are given it
// (capability portMappings).
type PortMapping struct {
	HostPort      int    `json:"hostPort"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol"`
	HostIP        string `json:"hostIP,omitempty"`
}

// backend returns the backend the plugin of type typ used, "" when none
// is recorded.
func (l *Live) backend(typ string) string { return l.Backends[typ] }

// addrs returns the result's addresses of one family (v6), in order.
func (l *Live) addrs(v6 bool) []netip.Prefix {
	if l.Result == nil {
		return nil
	}
	var out []netip.Prefix
	for _, ip := range l.Result.IPs {
		if ip.Addr.Addr().Is6() == v6 && ip.Addr.IsValid() {
			out = append(out, ip.Addr)
		}
	}
	return out
}

// allAddrs returns every address of the result, IPv4 first.
func (l *Live) allAddrs() []netip.Prefix { return append(l.addrs(false), l.addrs(true)...) }

// sandboxAddr returns the first address of family v6 on the workload's
// own interface, as portmap picks the address it maps ports to: an
// address that names an interface counts only when that interface is
// IfName inside a sandbox.
func (l *Live) sandboxAddr(v6 bool) (netip.Prefix, bool) {
	if l.Result == nil {
		return netip.Prefix{}, false
	}
	for _, ip := range l.Result.IPs {
		if !ip.Addr.IsValid() || ip.Addr.Addr().Is6() != v6 {
			continue
		}
		if i := ip.Interface; i >= 0 && i < len(l.Result.Interfaces) {
			if intf := l.Result.Interfaces[i]; intf.Name != l.IfName || intf.Sandbox == "" {
				continue
			}
		}
		return ip.Addr, true
	}
	return netip.Prefix{}, false
}

// workloadInterface returns the result's interface in the workload's
// namespace, named IfName.
func (l *Live) workloadInterface() (ResultInterface, bool) {
	if l.Result == nil {
		return ResultInterface{}, false
	}
	i := slices.IndexFunc(l.Result.Interfaces, func(r ResultInterface) bool { return r.Name == l.IfName && r.Sandbox != "" })
	if i < 0 {
		return ResultInterface{Name: l.IfName}, true // a result that lists no interface still made this one
	}
	return l.Result.Interfaces[i], true
}

// The workload's own devices: its interface, with the result's addresses,
// in its namespace, and (bridge, ptp) the host's end of its veth, on the
// bridge. None of them can be made again while the workload lives — a
// veth's two ends go together, and re-creating one is re-creating the
// workload — so what is missing here is NotInPlace.

// workloadDevices is the check of a live attachment's devices; it is no
// plugin's footprint (nothing of it is ever deleted by cleanup).
type workloadDevices struct{}

// Kinds of what a drift check finds missing besides what cleanup removes.
const (
	KindNetNS   Kind = "network namespace"
	KindAddress Kind = "address"
)

func (workloadDevices) expect(v *liveView, a *Live, h *Health) {
	intf, ok := a.workloadInterface()
	if !ok || a.NetNS == "" {
		return
	}
	if v.shallow {
		if _, err := os.Stat(a.NetNS); errors.Is(err, os.ErrNotExist) {
			h.miss(Missing{Plugin: "workload", Kind: KindNetNS, Backend: "links", Detail: a.NetNS, Restore: NotInPlace,
				Why: "the workload's network namespace is gone"})
		}
		return
	}
	_, inspector, err := v.hostLinks()
	if err != nil {
		h.unknown(err)
		return
	}
	lost := func(kind Kind, detail, why string) {
		h.miss(Missing{Plugin: "workload", Kind: kind, Backend: "links", Detail: detail, Restore: NotInPlace, Why: why})
	}
	link, found, err := inspector.LinkIn(a.NetNS, a.IfName)
	switch {
	case errors.Is(err, os.ErrNotExist):
		lost(KindNetNS, a.NetNS, "the workload's network namespace is gone")
		return
	case err != nil:
		h.unknown(fmt.Errorf("reading %s in %s: %w", a.IfName, a.NetNS, err))
	case !found:
		lost(KindLink, a.IfName+" in "+a.NetNS, "the workload's interface is gone")
	default:
		if intf.MAC != "" && link.MAC != "" && !strings.EqualFold(intf.MAC, link.MAC) {
			lost(KindLink, fmt.Sprintf("%s in %s with MAC %s", a.IfName, a.NetNS, intf.MAC), "its MAC is "+link.MAC+" now")
		}
		for _, ip := range a.Result.IPs {
			onIt := ip.Interface < 0 || ip.Interface >= len(a.Result.Interfaces) || a.Result.Interfaces[ip.Interface].Name == a.IfName
			if onIt && !slices.Contains(link.Addrs, ip.Addr) {
				lost(KindAddress, fmt.Sprintf("%s on %s in %s", ip.Addr, a.IfName, a.NetNS), "cninet does not address a workload's interface again")
			}
		}
	}
	hostDevices(v, a, h, lost)
}

// hostDevices expects the host's end of the workload's veth (the bridge
// and ptp plugins' result lists it without a sandbox), on the bridge.
func hostDevices(v *liveView, a *Live, h *Health, lost func(kind Kind, detail, why string)) {
	typ := ""
	for _, t := range []string{"bridge", "ptp"} {
		if a.Net.runs(t) {
			typ = t
		}
	}
	if typ == "" {
		return
	}
	links, _, err := v.hostLinks()
	if err != nil {
		h.unknown(err)
		return
	}
	bridge := ""
	if typ == "bridge" {
		type bridgeConf struct {
			Bridge string `json:"bridge"`
		}
		bridge = "cni0"
		if confs := configs[bridgeConf](a.Net, "bridge"); len(confs) > 0 && confs[0].Bridge != "" {
			bridge = confs[0].Bridge
		}
		if _, ok := links[bridge]; !ok {
			lost(KindLink, "bridge "+bridge, "the network's bridge is gone")
			return
		}
	}
	for _, intf := range a.Result.Interfaces {
		if intf.Sandbox != "" || intf.Name == bridge || intf.Name == "" {
			continue
		}
		link, ok := links[intf.Name]
		switch {
		case !ok:
			lost(KindLink, "veth "+intf.Name, "the host's end of the workload's veth is gone, and its peer with it")
		case bridge != "" && link.Master != bridge:
			lost(KindLink, fmt.Sprintf("veth %s on bridge %s", intf.Name, bridge), fmt.Sprintf("it is on %q now", link.Master))
		}
	}
}
