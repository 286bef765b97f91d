package cninet

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/internal/catalog"
)

// watchDebounce lets an editor's write-rename-chmod burst settle into one
// reload.
const watchDebounce = 200 * time.Millisecond

type watcher struct {
	fs   *fsnotify.Watcher
	done chan struct{}
	wg   sync.WaitGroup
}

// startWatcher watches nets' ConfDir and, once a burst of changes
// settles, calls reload (Configurator.Reload).
func startWatcher(nets *catalog.Networks, logger hclog.Logger, reload func() error) (*watcher, error) {
	fs, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, fmt.Errorf("%w: watching %s: %w", ErrIO, nets.ConfDir(), err)
	}
	if err := fs.Add(nets.ConfDir()); err != nil {
		fs.Close()
		return nil, fmt.Errorf("%w: watching %s: %w", ErrInvalidConfig, nets.ConfDir(), err)
	}
	w := &watcher{fs: fs, done: make(chan struct{})}
	w.wg.Add(1)
	go w.loop(nets, logger, reload)
	return w, nil
}

func (w *watcher) loop(nets *catalog.Networks, logger hclog.Logger, reload func() error) {
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
			logger.Warn("watching CNI config directory", "error", err)
		case <-timer.C:
			if err := reload(); err != nil && !errors.Is(err, ErrClosed) {
				logger.Error("CNI config changed but cannot be loaded; keeping the last good one", "error", err)
			} else if err == nil {
				logger.Info("CNI config reloaded", "network", nets.Default().Info.Name)
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
