package sandbox

import (
	"errors"
	"os"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
	"golang.org/x/sys/unix"
)

// Workload is a network namespace standing in for a workload.
type Workload struct {
	NS   ns.NetNS
	Path string
}

// CreateWorkload creates a workload namespace; the caller deletes it.
func CreateWorkload() (*Workload, error) {
	n, err := testutils.NewNS()
	if err != nil {
		return nil, err
	}
	return &Workload{NS: n, Path: n.Path()}, nil
}

// busyFor is how long Delete retries a namespace mount that is still in
// use before it detaches it lazily.
const busyFor = 2 * time.Second

// Delete removes the namespace, as a runtime does when a workload dies:
// its path is gone when Delete returns. Deleting twice is fine.
//
// On a loaded machine the bind mount can still be in use for a moment
// (a process that has the path open, a plugin still exiting): the
// unmount is retried for a while, then made lazily (MNT_DETACH), so the
// path is gone at once and the kernel frees the namespace once its last
// user goes. A history that deletes a namespace must not go on with the
// path still there: what runs next would take the workload for alive.
func (w *Workload) Delete() error {
	if w.NS == nil {
		return nil
	}
	w.NS.Close()
	path := w.NS.Path()
	w.NS = nil
	return unmount(path)
}

// unmount unmounts the namespace mounted at path and removes the file.
func unmount(path string) error {
	for deadline := time.Now().Add(busyFor); ; time.Sleep(20 * time.Millisecond) {
		err := unix.Unmount(path, 0)
		if err == nil {
			break
		}
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EBUSY) {
			return &os.PathError{Op: "unmount", Path: path, Err: err}
		}
		if time.Now().After(deadline) {
			if err := unix.Unmount(path, unix.MNT_DETACH); err != nil {
				return &os.PathError{Op: "unmount (detach)", Path: path, Err: err}
			}
			break
		}
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
