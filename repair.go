package cninet

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

// A drift check compares each live attachment with what its footprint
// says must be there (internal/footprint: Checker), reading the host once
// for all the attachments checked together; a repair restores what is
// missing in place (footprint.Checker.Repair), under the attachment's
// lock, only while its record says it is attached.

// checkedAttachment is one found attachment as a drift check sees it.
type checkedAttachment struct {
	fa   attachments.Found
	rec  *registry.Record // nil: the registry never saw it
	live *footprint.Live
}

// repairable reports whether a repair may write anything for it: its ADD
// returned and nothing began to take it down (its record says attached,
// or it has none and libcni's cache holds it).
func (ca checkedAttachment) repairable() bool {
	if ca.rec != nil {
		return ca.rec.State == registry.Attached
	}
	return ca.fa.Settled
}

// liveBuilder builds live attachments (footprint.Live) from their
// records, else libcni's cache.
type liveBuilder struct {
	registry    *attachments.Registry
	plugins     *catalog.Plugins
	seams       *attachments.Seams
	lib         *libcni.CNIConfig
	findPlugins bool // the default go-cni: libcni's cache holds what it attached
}

// checkedOf reads the records of found and builds their live attachments.
func (b *liveBuilder) checkedOf(found []attachments.Found, netns string) []checkedAttachment {
	out := make([]checkedAttachment, len(found))
	for i, fa := range found {
		rec := b.registry.Recorded(fa.Req.ID, fa.Att.Name(), fa.Att.IfName)
		out[i] = checkedAttachment{fa: fa, rec: rec, live: b.liveOf(fa, rec, netns)}
	}
	return out
}

// checkedOfRecord is the live attachment rec records.
func (b *liveBuilder) checkedOfRecord(rec *registry.Record) (checkedAttachment, bool) {
	conf, err := b.registry.RecordedConf(*rec)
	if err != nil {
		return checkedAttachment{}, false
	}
	fa := attachments.Found{Att: attachments.Attachment{Conf: conf, IfName: rec.IfName, ViaCNI: rec.ViaCNI},
		Req: attachments.RecordedRequest(attachments.Request{ID: rec.ID, RuntimeID: rec.RuntimeID}, *rec), Cached: true, Settled: true}
	return checkedAttachment{fa: fa, rec: rec, live: b.liveOf(fa, rec, "")}, true
}

// known reports whether cninet knows what ca's footprint must be: its
// record or libcni's cache holds the ADD's result. Of an attachment
// neither knows (never attached, or through a CNI whose cache cninet
// does not see) only the plugins' CHECK can tell.
func (ca checkedAttachment) known() bool { return ca.live.Result != nil || ca.rec != nil }

// driftResult is what a drift check, and a repair, did of one
// attachment.
type driftResult struct {
	health   footprint.Health    // what is missing, after the repair if any
	repaired []footprint.Missing // what the repair restored: missing before, there after
	err      error               // why the repair did not restore the rest
}

// repairer restores what a drift check found missing, through the
// plugins' own ADD, and writes libcni's cache again.
type repairer struct {
	plugins *catalog.Plugins
	drivers *attachments.Drivers
	tel     *telemetry.Recorder
}

// repairOne restores what h, found by read, says is missing of ca,
// under a span of its own, and counts it.
func (r *repairer) repairOne(ctx context.Context, read repairwatch.Checker, ca checkedAttachment, h footprint.Health) ([]footprint.Missing, error) {
	ctx, span := r.tel.StartRepair(ctx, ca.live.ID, ca.live.Network, ca.live.IfName)
	restored, err := read.Repair(h, r.restorers(ctx, ca))
	r.tel.Repaired(ctx, ca.live.Network, len(h.Missing), len(restored), err)
	span.End(err)
	return restored, err
}

// restorers are how a repair of ca runs the plugins and writes libcni's
// cache.
func (r *repairer) restorers(ctx context.Context, ca checkedAttachment) footprint.Restorers {
	fa, live := ca.fa, ca.live
	mode := os.FileMode(0o644) // host-local before its 1.2 releases (CNI spec 1.0)
	if r.plugins.Supports(ctx, "host-local", "1.1.0") {
		mode = 0o600
	}
	return footprint.Restorers{
		ReservationMode: mode,
		PluginADD: func(typ string) error {
			prev, err := liveResult(live)
			if err != nil {
				return err
			}
			return r.drivers.DriverFor(fa.Att).AddPlugin(ctx, fa.Req, fa.Att, live.NetNS, typ, prev)
		},
		WriteCache: func() error { return r.writeCachedResult(fa, live) },
	}
}

// liveResult is the attachment's result as the plugins take it.
func liveResult(live *footprint.Live) (types.Result, error) {
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

// writeCachedResult writes libcni's cache file of fa again, as libcni's
// ADD writes it: the conflist, the runtime's args and capability
// arguments, and the result in the conflist's CNI version.
func (r *repairer) writeCachedResult(fa attachments.Found, live *footprint.Live) error {
	res, err := liveResult(live)
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
func (b *liveBuilder) liveOf(fa attachments.Found, rec *registry.Record, netns string) *footprint.Live {
	att, req := fa.Att, fa.Req
	l := &footprint.Live{
		Attachment: footprint.Attachment{Network: att.Name(), ID: req.ID},
		IfName:     att.IfName,
		NetNS:      netns,
		Net:        b.seams.Network(att.Conf, att.IfName, nil),
		Backends:   map[string]string{},
		Uncached:   att.ViaCNI && !b.findPlugins,
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
		for typ, backend := range b.plugins.Backends(att.Conf) {
			l.Backends[typ] = backend
		}
	}
	l.Result = b.resultOf(raw, att, req)
	return l
}

// resultOf reads a recorded result, else libcni's cached one; nil when
// there is neither.
func (b *liveBuilder) resultOf(raw json.RawMessage, att attachments.Attachment, req attachments.Request) *footprint.Result {
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
		res, _ = b.lib.GetNetworkListCachedResult(att.Conf.List, &libcni.RuntimeConf{ContainerID: req.ID, IfName: att.IfName})
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
