package footprint

import (
	"encoding/json"

	"github.com/containernetworking/plugins/pkg/utils"
)

// The bandwidth plugin shapes a workload's ingress through an ifb device
// in the host's network namespace, one per attachment, named
//
//	bwp<h[:12]>   where h = hex(sha512(N+ID))
//
// (getIfbDeviceName in the plugin), with tc qdiscs on it that go with the
// device. Its DEL deletes the device; a crash, or a DEL that never ran,
// leaves it. The name is derived from the attachment and cannot be read
// back, so a GC finds it only for attachments it found otherwise.

type bandwidth struct{}

// maxIfbDeviceLength is the plugin's length of an ifb device name.
const maxIfbDeviceLength = 15

// BandwidthDevice is the bandwidth plugin's ifb device of the attachment.
func (a Attachment) BandwidthDevice() string {
	return utils.MustFormatHashWithPrefix(maxIfbDeviceLength, "bwp", a.Network+a.ID)
}

func (bandwidth) prove(*view, attSet) []claim            { return nil }
func (bandwidth) holders(*view, attSet, addrSet) []claim { return nil }
func (bandwidth) discover(*view, attSet)                 {}

func (bandwidth) plan(v *view, set attSet, _ *evidence, p *plan) {
	if v.links == nil {
		return
	}
	for _, a := range set.sorted() {
		if !v.nets[a.Network].runs("bandwidth") {
			continue
		}
		name := a.BandwidthDevice()
		if ok, err := v.links.LinkExists(name); err != nil {
			v.errs.add(err)
		} else if ok {
			p.links = append(p.links, linkChange{att: a, name: name})
		}
	}
}

// bandwidthConf is what of the bandwidth plugin's configuration says
// whether it shapes egress, which is what its ifb device is for. A rate
// or burst named in the configuration (any of the four) makes the plugin
// take the configuration's, else the bandwidth capability's
// (getBandwidth in the plugin).
type bandwidthConf struct {
	IngressRate, IngressBurst, EgressRate, EgressBurst *uint64
}

func (b bandwidthConf) named() bool {
	return b.IngressRate != nil || b.IngressBurst != nil || b.EgressRate != nil || b.EgressBurst != nil
}

func (b bandwidthConf) egress() bool {
	return b.EgressRate != nil && b.EgressBurst != nil && *b.EgressRate > 0 && *b.EgressBurst > 0
}

// expect: the ifb device, where the plugin shapes the workload's egress.
// Its tc setup on the host's veth is gone with the device: not restored
// in place.
func (bandwidth) expect(v *liveView, a *Live, h *Health) {
	if v.shallow {
		return // its ifb is a device
	}
	type pluginConf struct {
		bandwidthConf
		Capabilities map[string]bool `json:"capabilities"`
	}
	confs := configs[pluginConf](a.Net, "bandwidth")
	if len(confs) == 0 {
		return
	}
	bw := confs[0].bandwidthConf
	if raw, ok := a.Capabilities["bandwidth"]; !bw.named() && ok && confs[0].Capabilities["bandwidth"] { // libcni passes a capability only to a plugin that declares it
		bw = bandwidthConf{}
		if json.Unmarshal(raw, &bw) != nil {
			return
		}
	}
	if !bw.egress() {
		return
	}
	links, _, err := v.hostLinks()
	if err != nil {
		h.unknown(err)
		return
	}
	if name := a.BandwidthDevice(); links[name].Name == "" {
		h.miss(Missing{Plugin: "bandwidth", Kind: KindLink, Backend: "links", Detail: "ifb " + name, Restore: NotInPlace,
			Why: "the bandwidth plugin's shaping is not restored in place"})
	}
}
