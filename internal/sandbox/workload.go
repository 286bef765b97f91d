package sandbox

import (
	"errors"
	"os"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/containernetworking/plugins/pkg/testutils"
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

// Delete removes the namespace, as a runtime does when a workload dies;
// deleting twice is fine.
func (w *Workload) Delete() error {
	if w.NS == nil {
		return nil
	}
	w.NS.Close()
	err := testutils.UnmountNS(w.NS)
	w.NS = nil
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return err
}
