package thick

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/registry"
	"go.opentelemetry.io/otel/metric"
)

// ErrNoDelegates: the daemon's conf dir holds no delegate conflist yet
// (it is empty, missing, or every file in it is unreadable). The daemon
// serves anyway and is not ready: STATUS answers code 50 and /readyz 503
// until a conflist appears.
var ErrNoDelegates = errors.New("no delegate conflist")

// DefaultWatchInterval is how often Delegates.Watch looks at the conf
// dir for a change.
const DefaultWatchInterval = 2 * time.Second

// Delegates is the daemon's Configurator of the conf dir's delegate
// networks, made once the conf dir holds a conflist and reloaded when it
// changes. A daemon starts without one (an empty or missing conf dir) and
// is then not ready; a conf dir emptied later keeps the networks last
// loaded (Configurator.Reload refuses an empty one).
type Delegates struct {
	info   Info
	logger hclog.Logger
	meters metric.MeterProvider
	tweaks []func(*cninet.Config)

	mu       sync.Mutex
	c        *cninet.Configurator // nil until the conf dir holds a conflist
	stamp    string               // the conf dir as last loaded (confDirStamp)
	onReload []func()             // see OnReload
}

// OnReload has fn called after every Reload that read conflists: the
// first that made the Configurator, and each reload of it after (from the
// watch, SIGHUP or a request), whether or not the conf dir could be
// loaded; not a Reload that still finds no conflist. The daemon drops its
// cached readiness verdict there (ReadinessCache.Invalidate). fn runs with
// the Delegates locked: it must not call them.
func (d *Delegates) OnReload(fn func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.onReload = append(d.onReload, fn)
}

// reloaded calls the OnReload functions; d.mu is held.
func (d *Delegates) reloaded() {
	for _, fn := range d.onReload {
		fn()
	}
}

// OpenDelegates returns the Delegates of info's conf dir, with a
// Configurator when the dir holds a conflist (NewConfigurator's
// arguments). A conf dir that is empty or missing is no error: the
// Delegates are then not ready (ErrNoDelegates) until Reload or Watch
// finds a conflist. Any other error of NewConfigurator is returned.
func OpenDelegates(info Info, logger hclog.Logger, meters metric.MeterProvider, tweaks ...func(*cninet.Config)) (*Delegates, error) {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	d := &Delegates{info: info, logger: logger, meters: meters, tweaks: tweaks}
	if err := d.Reload(); err != nil && !errors.Is(err, ErrNoDelegates) {
		return nil, err
	}
	return d, nil
}

// Configurator returns the Configurator of the delegate networks, or an
// error wrapping ErrNoDelegates (and cninet.ErrNetworkNotFound) while the
// conf dir has held none. A request that finds none makes it look again
// first, as a request naming an unknown network does.
func (d *Delegates) Configurator() (Configurator, error) {
	d.mu.Lock()
	c := d.c
	d.mu.Unlock()
	if c != nil {
		return c, nil
	}
	if err := d.Reload(); err != nil {
		return nil, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.c, nil
}

// Reload reads the conf dir again: the first conflist makes the
// Configurator, later changes reload it (cninet.Configurator.Reload: a
// broken or emptied conf dir keeps the networks last loaded, and the
// error says why). Watch calls it on a change; the daemon also on SIGHUP.
func (d *Delegates) Reload() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	// The stamp is taken before the read, whatever it finds: a conf dir
	// that cannot be loaded is tried again on its next change (or
	// SIGHUP), not at every look.
	d.stamp = confDirStamp(d.info.ConfDir)
	if d.c != nil {
		defer d.reloaded()
		return d.c.Reload()
	}
	c, err := NewConfigurator(d.info, d.logger, d.meters, d.tweaks...)
	if err != nil {
		if errors.Is(err, cninet.ErrNetworkNotFound) || errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %w in %s yet (add one; the daemon picks it up): %w", cninet.ErrNetworkNotFound, ErrNoDelegates, d.info.ConfDir, err)
		}
		return err
	}
	d.c = c
	d.reloaded()
	d.logger.Info("delegate conflists loaded", "conf_dir", d.info.ConfDir, "networks", strings.Join(c.Networks(), ","))
	return nil
}

// Watch reloads whenever the conf dir changes (a file added, removed,
// renamed or rewritten), looking every interval (DefaultWatchInterval
// when 0) until ctx is done. Polling sees a conf dir that appears after
// the daemon started, or is replaced whole, as well as one edited in
// place.
func (d *Delegates) Watch(ctx context.Context, interval time.Duration) {
	if interval <= 0 {
		interval = DefaultWatchInterval
	}
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		d.mu.Lock()
		changed := confDirStamp(d.info.ConfDir) != d.stamp
		d.mu.Unlock()
		if !changed {
			continue
		}
		if err := d.Reload(); err != nil {
			d.logger.Warn("conf dir changed but cannot be loaded; keeping what was loaded", "conf_dir", d.info.ConfDir, "error", err)
		} else {
			d.logger.Info("conf dir changed: reloaded", "conf_dir", d.info.ConfDir)
		}
	}
}

// Ready returns nil when the delegates can attach workloads: a conflist
// is loaded and every delegate network's STATUS passes. Otherwise the
// error (wrapping cninet.ErrNotReady) says which network is not and why.
func (d *Delegates) Ready(ctx context.Context) error {
	c, err := d.Configurator()
	if err != nil {
		return fmt.Errorf("%w: %w", cninet.ErrNotReady, err)
	}
	return c.Status(ctx, c.Networks()...)
}

// Close closes the Configurator, if any.
func (d *Delegates) Close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.c == nil {
		return nil
	}
	return d.c.Close()
}

// confDirStamp is what Watch compares: every entry's name, size, mode
// and modification time; "" when the dir cannot be read.
func confDirStamp(dir string) string {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return ""
	}
	var b strings.Builder
	for _, e := range entries {
		fi, err := e.Info()
		if err != nil {
			continue
		}
		fmt.Fprintf(&b, "%s\x00%d\x00%o\x00%d\n", e.Name(), fi.Size(), fi.Mode(), fi.ModTime().UnixNano())
	}
	return b.String()
}

// ConfiguratorForDel returns a Configurator for a DEL of req in network
// conf.Name: info's (NewConfigurator) when its conf dir holds a conflist;
// when it holds none, one of the conflist the host registry recorded for
// the attachment at its ADD, so that a DEL after every conflist went (the
// daemon restarted since) still removes the attachment. Without either,
// the error wraps ErrNoDelegates and cninet.ErrNetworkNotFound.
func ConfiguratorForDel(info Info, req *Request, conf *NetConf, logger hclog.Logger, meters metric.MeterProvider, tweaks ...func(*cninet.Config)) (*cninet.Configurator, error) {
	// It lives for one DEL: no repair watcher, whatever the daemon's own
	// Configurator runs.
	tweaks = append(slices.Clone(tweaks), func(cfg *cninet.Config) { cfg.RepairEvery, cfg.RepairAnyOwner = 0, false })
	c, err := NewConfigurator(info, logger, meters, tweaks...)
	if err == nil || !(errors.Is(err, cninet.ErrNetworkNotFound) || errors.Is(err, fs.ErrNotExist)) {
		return c, err
	}
	recorded, rerr := recordedConfList(info.StateDir, req.ContainerID, conf.Name, req.IfName)
	if rerr != nil {
		return nil, fmt.Errorf("%w: %w in %s, and %w", cninet.ErrNetworkNotFound, ErrNoDelegates, info.ConfDir, rerr)
	}
	only := func(cfg *cninet.Config) { cfg.ConfDir, cfg.ConfLists = "", [][]byte{recorded} }
	return NewConfigurator(info, logger, meters, append(slices.Clone(tweaks), only)...)
}

// recordedConfList is the conflist the host registry in stateDir
// recorded at the ADD of id in network as ifName, under the container id
// or its delegate id.
func recordedConfList(stateDir, id, network, ifName string) ([]byte, error) {
	if stateDir == "" {
		stateDir = DefaultStateDir
	}
	store, err := registry.Open(stateDir)
	if err != nil {
		return nil, fmt.Errorf("the host registry cannot be read: %w", err)
	}
	for _, of := range []string{id, delegateIDOf(id, ifName)} {
		recs, _, err := store.Of(of)
		if err != nil {
			return nil, fmt.Errorf("the host registry cannot be read: %w", err)
		}
		for _, rec := range recs {
			runtimeID := cmp.Or(rec.RuntimeID, rec.ID)
			if rec.Network == network && rec.IfName == ifName && runtimeID == id && len(rec.ConfList) > 0 {
				return rec.ConfList, nil
			}
		}
	}
	return nil, fmt.Errorf("the host registry records no conflist for %s in network %q as %s", id, network, ifName)
}
