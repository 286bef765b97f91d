package cninet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	cni "github.com/containerd/go-cni"
	"github.com/containernetworking/cni/libcni"
	"github.com/fsnotify/fsnotify"
)

// Status reports whether this Configurator can attach workloads now: the
// conflist is loaded, every plugin it names is in the plugin dirs and
// supports its cniVersion, and the CNI 1.1 STATUS verb (for conflists of
// that version) passes. The error (ErrNotReady, plus ErrPluginMissing when
// a plugin is absent) names what is wrong. Suitable for a node fingerprint.
func (c *Configurator) Status(ctx context.Context) error {
	conf, err := c.current()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	if err := c.checkPluginsIn(conf); err != nil {
		return fmt.Errorf("%w: %w", ErrNotReady, err)
	}
	if _, err := c.libcni().ValidateNetworkList(ctx, conf.list); err != nil {
		return fmt.Errorf("%w: network %q: %v", ErrNotReady, conf.info.name, err)
	}
	if err := c.cni.Status(); err != nil {
		return fmt.Errorf("%w: CNI STATUS: %w", ErrNotReady, err)
	}
	return nil
}

// libcni returns a libcni client over the same plugin dirs and cache as
// go-cni, for the verbs go-cni does not offer (VERSION, GC).
func (c *Configurator) libcni() *libcni.CNIConfig {
	return libcni.NewCNIConfigWithCacheDir(c.pluginDirs, c.cacheDir, nil)
}

// Reload re-reads the conflist from ConfDir and hands it to go-cni. When
// the new file is missing or broken, the last good conflist stays in use
// and the error says why. A Configurator built from ConfList bytes has
// nothing to reload: that is an ErrInvalidConfig error.
func (c *Configurator) Reload() error {
	if c.confDir == "" {
		return fmt.Errorf("%w: no ConfDir to reload from", ErrInvalidConfig)
	}
	conf, err := c.readConf(nil)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	if err := c.cni.Load(cni.WithConfListBytes(conf.bytes)); err != nil {
		c.loaded = false // go-cni reset itself; load the last good one on next use
		return fmt.Errorf("%w: loading conflist %q: %v", ErrInvalidConfig, conf.info.name, err)
	}
	c.conf, c.loaded = conf, true
	return nil
}

// Close stops watching ConfDir. Calls after Close fail with ErrClosed,
// except Teardown, which still cleans up. Close is idempotent.
func (c *Configurator) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return c.closeErr
	}
	c.closed = true
	w := c.watcher
	c.mu.Unlock()
	if w != nil {
		c.closeErr = w.stop()
	}
	return c.closeErr
}

// watchDebounce lets an editor's write-rename-chmod burst settle into one
// reload.
const watchDebounce = 200 * time.Millisecond

type watcher struct {
	fs   *fsnotify.Watcher
	done chan struct{}
	wg   sync.WaitGroup
}

func startWatcher(c *Configurator) (*watcher, error) {
	fs, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	if err := fs.Add(c.confDir); err != nil {
		fs.Close()
		return nil, fmt.Errorf("%w: watching %s: %v", ErrInvalidConfig, c.confDir, err)
	}
	w := &watcher{fs: fs, done: make(chan struct{})}
	w.wg.Add(1)
	go w.loop(c)
	return w, nil
}

func (w *watcher) loop(c *Configurator) {
	defer w.wg.Done()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	for {
		select {
		case <-w.done:
			timer.Stop()
			return
		case _, ok := <-w.fs.Events:
			if !ok {
				return
			}
			timer.Reset(watchDebounce)
		case err, ok := <-w.fs.Errors:
			if !ok {
				return
			}
			c.logger.Warn("watching CNI config directory", "error", err)
		case <-timer.C:
			if err := c.Reload(); err != nil && !errors.Is(err, ErrClosed) {
				c.logger.Error("CNI config changed but cannot be loaded; keeping the last good one", "error", err)
			} else if err == nil {
				c.logger.Info("CNI config reloaded", "network", c.NetworkName())
			}
		}
	}
}

func (w *watcher) stop() error {
	close(w.done)
	err := w.fs.Close()
	w.wg.Wait()
	return err
}
