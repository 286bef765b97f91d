package cninet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/registry"
)

// A drift check compares each live attachment with what its footprint
// says must be there (internal/footprint: Checker), reading the host once
// for all the attachments checked together; a repair restores what is
// missing in place (footprint.Checker.Repair), under the attachment's
// lock, only while its record says it is attached.

// checkedAttachment is one found attachment as a drift check sees it.
type checkedAttachment struct {
	fa   foundAttachment
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
	return ca.fa.settled
}

// checkedOf reads the records of found and builds their live attachments.
func (c *Configurator) checkedOf(found []foundAttachment, netns string) []checkedAttachment {
	out := make([]checkedAttachment, len(found))
	for i, fa := range found {
		rec := c.registry.recorded(fa.req.id, fa.att.name(), fa.att.ifName)
		out[i] = checkedAttachment{fa: fa, rec: rec, live: c.liveOf(fa, rec, netns)}
	}
	return out
}

// known reports whether cninet knows what ca's footprint must be: its
// record or libcni's cache holds the ADD's result. Of an attachment
// neither knows (never attached, or through a CNI whose cache cninet
// does not see) only the plugins' CHECK can tell.
func (ca checkedAttachment) known() bool { return ca.live.Result != nil || ca.rec != nil }

// driftCheck checks atts in one read of the host and, with repair,
// restores what each repairable one lacks, then checks those again. The
// caller holds their ids' locks. It returns each attachment's health
// (after the repair) and what the repair restored.
func (c *Configurator) driftCheck(ctx context.Context, atts []checkedAttachment, repair bool) ([]footprint.Health, [][]footprint.Missing) {
	var lives []*footprint.Live
	at := make([]int, len(atts)) // atts[i]'s place in lives, or -1
	for i, ca := range atts {
		at[i] = -1
		if ca.known() {
			at[i] = len(lives)
			lives = append(lives, ca.live)
		}
	}
	checker := footprint.NewChecker(ctx, c.seams.all())
	checked := checker.Check(lives)
	health := make([]footprint.Health, len(atts))
	for i := range atts {
		health[i] = footprint.Health{Live: atts[i].live}
		if at[i] >= 0 {
			health[i] = checked[at[i]]
		}
	}
	restored := make([][]footprint.Missing, len(atts))
	if !repair {
		return health, restored
	}
	var again []int
	for i, h := range health {
		if len(h.Missing) == 0 || !atts[i].repairable() {
			continue
		}
		restored[i] = c.repairOne(ctx, checker, atts[i], h)
		again = append(again, i)
	}
	if len(again) > 0 {
		recheck := make([]*footprint.Live, len(again))
		for j, i := range again {
			recheck[j] = atts[i].live
		}
		for j, h := range footprint.NewChecker(ctx, c.seams.all()).Check(recheck) {
			health[again[j]] = h
		}
	}
	return health, restored
}

// repairOne restores what h found missing of ca, and reports it: a span,
// a log line naming what was restored, the metrics.
func (c *Configurator) repairOne(ctx context.Context, checker *footprint.Checker, ca checkedAttachment, h footprint.Health) []footprint.Missing {
	start := time.Now()
	ctx, span := c.tel.startRepair(ctx, ca.live)
	restored, err := checker.Repair(h, c.restorers(ctx, ca))
	c.tel.repaired(ctx, ca.live, len(h.Missing), len(restored), err)
	span.end(err)
	a := ca.live
	items := make([]string, len(restored))
	for i, m := range restored {
		items[i] = m.String()
	}
	switch {
	case errors.Is(err, footprint.ErrNotInPlace):
		c.logger.Error("attachment cannot be repaired in place: re-create the workload", "alloc_id", a.ID, "network", a.Network,
			"ifname", a.IfName, "error", err)
	case err != nil:
		c.logger.Error("attachment repair incomplete", "alloc_id", a.ID, "network", a.Network, "ifname", a.IfName,
			"restored", items, "error", err, "duration", time.Since(start))
	default:
		c.logger.Info("attachment repaired", "alloc_id", a.ID, "network", a.Network, "ifname", a.IfName,
			"restored", items, "duration", time.Since(start))
	}
	return restored
}

// restorers are how a repair of ca runs the plugins and writes libcni's
// cache.
func (c *Configurator) restorers(ctx context.Context, ca checkedAttachment) footprint.Restorers {
	fa, live := ca.fa, ca.live
	mode := os.FileMode(0o644) // host-local before its 1.2 releases (CNI spec 1.0)
	if c.plugins.versions.supports(ctx, c.lib, "host-local", "1.1.0") {
		mode = 0o600
	}
	return footprint.Restorers{
		ReservationMode: mode,
		PluginADD: func(typ string) error {
			prev, err := liveResult(live)
			if err != nil {
				return err
			}
			return c.driverFor(fa.att).addPlugin(ctx, fa.req, fa.att, live.NetNS, typ, prev)
		},
		WriteCache: func() error { return c.writeCachedResult(fa, live) },
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
func (c *Configurator) writeCachedResult(fa foundAttachment, live *footprint.Live) error {
	res, err := liveResult(live)
	if err != nil {
		return err
	}
	list := fa.att.conf.list
	if res, err = res.GetAsVersion(list.CNIVersion); err != nil {
		return err
	}
	rt := runtimeConfOf(fa.req, fa.att, live.NetNS)
	var result map[string]any
	b, err := json.Marshal(res)
	if err == nil {
		err = json.Unmarshal(b, &result)
	}
	if err != nil {
		return err
	}
	body, err := json.Marshal(cachedInfo{Kind: libcni.CNICacheV1, ContainerID: rt.ContainerID, Config: list.Bytes, IfName: rt.IfName,
		NetworkName: list.Name, NetNS: rt.NetNS, CNIArgs: rt.Args, CapabilityArgs: rt.CapabilityArgs, Result: result})
	if err != nil {
		return err
	}
	path := filepath.Join(c.cacheDir, "results", strings.Join([]string{list.Name, rt.ContainerID, rt.IfName}, "-"))
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, os.ErrExist) {
		return nil // libcni wrote it meanwhile: its own is as good
	}
	if err != nil {
		return err
	}
	_, werr := f.Write(body)
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		os.Remove(path)
		return fmt.Errorf("writing %s: %w", path, werr)
	}
	return nil
}

// cachedInfo is libcni's cache file, as its ADD writes it.
type cachedInfo struct {
	Kind           string         `json:"kind"`
	ContainerID    string         `json:"containerId"`
	Config         []byte         `json:"config"`
	IfName         string         `json:"ifName"`
	NetworkName    string         `json:"networkName"`
	NetNS          string         `json:"netns,omitempty"`
	CNIArgs        [][2]string    `json:"cniArgs,omitempty"`
	CapabilityArgs map[string]any `json:"capabilityArgs,omitempty"`
	Result         map[string]any `json:"result,omitempty"`
}
