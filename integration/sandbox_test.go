package integration

import (
	"errors"
	"os"
	"testing"

	"github.com/seed1280861d/cninet/internal/netsandbox"
	"golang.org/x/sys/unix"
)

// A history that deletes a workload's namespace goes on as if the
// runtime had: the path must be gone, even while something still has it
// open (a plugin exiting on a loaded machine), or what runs next takes
// the workload for alive.
func TestDeletingAWorkloadsNamespaceRemovesItsPathEvenWhileItIsStillOpen(t *testing.T) {
	w := netsandbox.NewWorkload(t)
	held, err := os.Open(w.Path)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	// The positive control: with the path open, a plain unmount is
	// refused, as it was for the histories that failed under load.
	if err := unix.Unmount(w.Path, 0); !errors.Is(err, unix.EBUSY) {
		t.Fatalf("unmounting a namespace whose path is open: %v, want EBUSY (the case Delete must get through)", err)
	}
	if err := w.Delete(); err != nil {
		t.Fatalf("Delete with the path still open: %v", err)
	}
	if _, err := os.Stat(w.Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("after Delete, %s: %v, want it gone", w.Path, err)
	}
	if err := w.Delete(); err != nil {
		t.Fatalf("a second Delete: %v, want nil", err)
	}
}
