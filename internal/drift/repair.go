package drift

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/seed1280861d/cninet/internal/attachments"
	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/registry"
	"github.com/seed1280861d/cninet/internal/repairwatch"
	"github.com/seed1280861d/cninet/internal/telemetry"
)

// Checked is one found attachment as a drift check sees it.
type Checked struct {
	Found attachments.Found
	Rec   *registry.Record // nil: the registry never saw it
	Live  *footprint.Live
}

// Repairable reports whether a repair may write anything for it: its ADD
// returned and nothing began to take it down (its record says attached,
// or it has none and libcni's cache holds it).
func (ca Checked) Repairable() bool {
	if ca.Rec != nil {
		return ca.Rec.State == registry.Attached
	}
	return ca.Found.Settled
}

// LiveBuilder builds live attachments (footprint.Live) from their
// records, else libcni's cache.
type LiveBuilder struct {
	Registry    *attachments.Registry
	Plugins     *catalog.Plugins
	Seams       *attachments.Seams
	Lib         *libcni.CNIConfig
	FindPlugins bool // the default go-cni: libcni's cache holds what it attached
}

// CheckedOf reads the records of found and builds their live attachments.
func (b *LiveBuilder) CheckedOf(found []attachments.Found, netns string) []Checked {
	out := make([]Checked, len(found))
	for i, fa := range found {
		rec := b.Registry.Recorded(fa.Req.ID, fa.Att.Name(), fa.Att.IfName)
		out[i] = Checked{Found: fa, Rec: rec, Live: b.liveOf(fa, rec, netns)}
	}
	return out
}

// CheckedOfRecord is the live attachment rec records.
func (b *LiveBuilder) CheckedOfRecord(rec *registry.Record) (Checked, bool) {
	conf, err := b.Registry.RecordedConf(*rec)
	if err != nil {
		return Checked{}, false
	}
	fa := attachments.Found{Att: attachments.Attachment{Conf: conf, IfName: rec.IfName, ViaCNI: rec.ViaCNI},
		Req: attachments.RecordedRequest(attachments.Request{ID: rec.ID, RuntimeID: rec.RuntimeID}, *rec), Cached: true, Settled: true}
	return Checked{Found: fa, Rec: rec, Live: b.liveOf(fa, rec, "")}, true
}

// Known reports whether cninet knows what ca's footprint must be: its
// record or libcni's cache holds the ADD's result. Of an attachment
// neither knows (never attached, or through a CNI whose cache cninet
// does not see) only the plugins' CHECK can tell.
func (ca Checked) Known() bool { return ca.Live.Result != nil || ca.Rec != nil }

// Result is what a drift check, and a repair, did of one
// attachment.
type Result struct {
	Health   footprint.Health    // what is missing, after the repair if any
	Repaired []footprint.Missing // what the repair restored: missing before, there after
	Err      error               // why the repair did not restore the rest
}

// Repairer restores what a drift check found missing, through the
// plugins' own ADD, and writes libcni's cache again.
type Repairer struct {
	Plugins *catalog.Plugins
	Drivers *attachments.Drivers
	Tel     *telemetry.Recorder
}

// RepairOne restores what h, found by read, says is missing of ca,
// under a span of its own, and counts it.
func (r *Repairer) RepairOne(ctx context.Context, read repairwatch.Checker, ca Checked, h footprint.Health) ([]footprint.Missing, error) {
	ctx, span := r.Tel.StartRepair(ctx, ca.Live.ID, ca.Live.Network, ca.Live.IfName)
	restored, err := read.Repair(h, r.restorers(ctx, ca))
	r.Tel.Repaired(ctx, ca.Live.Network, len(h.Missing), len(restored), err)
	span.End(err)
	return restored, err
}

// restorers are how a repair of ca runs the plugins and writes libcni's
// cache.
func (r *Repairer) restorers(ctx context.Context, ca Checked) footprint.Restorers {
	fa, live := ca.Found, ca.Live
	mode := os.FileMode(0o644) // host-local before its 1.2 releases (CNI spec 1.0)
	if r.Plugins.Supports(ctx, "host-local", "1.1.0") {
		mode = 0o600
	}
	return footprint.Restorers{
		ReservationMode: mode,
		PluginADD: func(typ string) error {
			prev, err := LiveResult(live)
			if err != nil {
				return err
			}
			return r.Drivers.DriverFor(fa.Att).AddPlugin(ctx, fa.Req, fa.Att, live.NetNS, typ, prev)
		},
		WriteCache: func() error { return r.WriteCachedResult(fa, live) },
	}
}

// LiveResult is the attachment's result as the plugins take it.
func LiveResult(live *footprint.Live) (types.Result, error) {
	if live.Result == nil || len(live.Result.Raw) == 0 {
		return nil, errors.New("no result of the attachment is known (neither its record nor libcni's cache holds one)")
	}
	var head struct {
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal(live.Result.Raw, &head); err != nil {
		return nil, err
	}
	return version.NewResult(head.CNIVersion, live.Result.Raw)
}

// WriteCachedResult writes libcni's cache file of fa again, as libcni's
// ADD writes it: the conflist, the runtime's args and capability
// arguments, and the result in the conflist's CNI version.
func (r *Repairer) WriteCachedResult(fa attachments.Found, live *footprint.Live) error {
	res, err := LiveResult(live)
	if err != nil {
		return err
	}
	list := fa.Att.Conf.List
	if res, err = res.GetAsVersion(list.CNIVersion); err != nil {
		return err
	}
	rt := attachments.RuntimeConfOf(fa.Req, fa.Att, live.NetNS)
	var result map[string]any
	b, err := json.Marshal(res)
	if err == nil {
		err = json.Unmarshal(b, &result)
	}
	if err != nil {
		return err
	}
	body, err := json.Marshal(cachedInfo{Kind: libcni.CNICacheV1, ContainerID: rt.ContainerID, Conf: list.Bytes, IfName: rt.IfName,
		NetworkName: list.Name, NetNS: rt.NetNS, CNIArgs: rt.Args, CapabilityArgs: rt.CapabilityArgs, Result: result})
	if err != nil {
		return err
	}
	path := filepath.Join(live.Net.CacheDir, "results", strings.Join([]string{list.Name, rt.ContainerID, rt.IfName}, "-"))
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	if err := footprint.CreateWhole(path, body, 0o600); !errors.Is(err, os.ErrExist) {
		return err
	}
	return nil // libcni wrote it meanwhile: its own is as good
}

// cachedInfo is libcni's cache file, as its ADD writes it.
type cachedInfo struct {
	Kind           string         `json:"kind"`
	ContainerID    string         `json:"containerId"`
	Conf           []byte         `json:"config"`
	IfName         string         `json:"ifName"`
	NetworkName    string         `json:"networkName"`
	NetNS          string         `json:"netns,omitempty"`
	CNIArgs        [][2]string    `json:"cniArgs,omitempty"`
	CapabilityArgs map[string]any `json:"capabilityArgs,omitempty"`
	Result         map[string]any `json:"result,omitempty"`
}

// A live attachment, as a drift check sees it (footprint.Live), is built
// from its record in the host registry: the conflist and the backends its
// ADD ran with, its port mappings and capability arguments, and the ADD's
// result (from libcni's cache for a record that has none).

// liveOf returns fa's live attachment: what its record (rec, nil for one
// the registry never saw) and libcni's cache say. netns is the namespace
// the caller named ("" takes the record's).
func (b *LiveBuilder) liveOf(fa attachments.Found, rec *registry.Record, netns string) *footprint.Live {
	att, req := fa.Att, fa.Req
	l := &footprint.Live{
		Attachment: footprint.Attachment{Network: att.Name(), ID: req.ID},
		IfName:     att.IfName,
		NetNS:      netns,
		Net:        b.Seams.Network(att.Conf, att.IfName, nil),
		Backends:   map[string]string{},
		Uncached:   att.ViaCNI && !b.FindPlugins,
	}
	for _, m := range req.Mappings {
		l.Mappings = append(l.Mappings, footprint.PortMapping{HostPort: int(m.HostPort), ContainerPort: int(m.ContainerPort),
			Protocol: m.Protocol, HostIP: m.HostIP})
	}
	var raw json.RawMessage
	if rec != nil {
		for _, p := range rec.Plugins {
			if p.Backend != "" {
				l.Backends[p.Type] = p.Backend
			}
		}
		l.Capabilities, raw = rec.Capabilities, rec.Result
		if l.NetNS == "" {
			l.NetNS = rec.NetNS
		}
		if rec.CacheDir != "" { // its maker's libcni cache, which may not be this process's
			l.Net.CacheDir = rec.CacheDir
		}
	} else {
		for typ, backend := range b.Plugins.Backends(att.Conf) {
			l.Backends[typ] = backend
		}
	}
	l.Result = b.resultOf(raw, att, req)
	return l
}

// resultOf reads a recorded result, else libcni's cached one; nil when
// there is neither.
func (b *LiveBuilder) resultOf(raw json.RawMessage, att attachments.Attachment, req attachments.Request) *footprint.Result {
	var res types.Result
	if len(raw) > 0 {
		var head struct {
			CNIVersion string `json:"cniVersion"`
		}
		if json.Unmarshal(raw, &head) == nil {
			res, _ = version.NewResult(cmp.Or(head.CNIVersion, types100.ImplementedSpecVersion), raw)
		}
	}
	if res == nil {
		res, _ = b.Lib.GetNetworkListCachedResult(att.Conf.List, &libcni.RuntimeConf{ContainerID: req.ID, IfName: att.IfName})
	}
	if res == nil {
		return nil
	}
	r, err := types100.NewResultFromResult(res)
	if err != nil {
		return nil
	}
	out := &footprint.Result{}
	if out.Raw, err = json.Marshal(r); err != nil {
		return nil
	}
	for _, intf := range r.Interfaces {
		if intf == nil {
			intf = &types100.Interface{}
		}
		out.Interfaces = append(out.Interfaces, footprint.ResultInterface{Name: intf.Name, MAC: intf.Mac, Sandbox: intf.Sandbox})
	}
	for _, ip := range r.IPs {
		if ip == nil {
			continue
		}
		p, ok := prefixOf(ip.Address)
		if !ok {
			continue
		}
		i := -1
		if ip.Interface != nil {
			i = *ip.Interface
		}
		out.IPs = append(out.IPs, footprint.ResultIP{Addr: p, Interface: i})
	}
	return out
}

// prefixOf is an address with its prefix length, as a result gives it.
func prefixOf(n net.IPNet) (netip.Prefix, bool) {
	addr, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	addr = addr.Unmap()
	ones, bits := n.Mask.Size()
	if bits == 0 {
		ones = addr.BitLen()
	}
	if addr.Is4() && bits == 128 {
		ones -= 96
	}
	return netip.PrefixFrom(addr, ones), true
}
