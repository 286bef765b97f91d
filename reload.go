package cninet

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/seed1280861d/cninet/internal/telemetry"
)

// Reload re-reads every network from ConfDir (ConfList and ConfLists
// bytes stay as given, and still win) and hands the default network's
// conflist to go-cni. When the default network's file is missing or
// broken, or a conflist given as bytes is, everything stays as it was and
// the error says why; other broken files are skipped. A network that is
// gone from ConfDir can no longer be joined, but Teardown still detaches
// workloads that joined it. A Configurator without ConfDir has nothing to
// reload: that is an ErrInvalidConfig error.
func (c *Configurator) Reload() (err error) {
	_, op := c.tel.StartOp(context.Background(), telemetry.OpReload, "", "")
	defer func() { op.End(err) }()
	if c.nets.ConfDir() == "" {
		return fmt.Errorf("%w: no ConfDir to reload from", ErrInvalidConfig)
	}
	return c.nets.Reload()
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
		return nil, fmt.Errorf("%w: watching %s: %w", ErrIO, c.nets.ConfDir(), err)
	}
	if err := fs.Add(c.nets.ConfDir()); err != nil {
		fs.Close()
		return nil, fmt.Errorf("%w: watching %s: %w", ErrInvalidConfig, c.nets.ConfDir(), err)
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
