package footprint

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
)

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
