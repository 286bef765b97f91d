package netsandbox

import (
	"testing"

	"github.com/seed1280861d/cninet/internal/sandbox"
)

// Workload is a network namespace standing in for a workload.
type Workload = sandbox.Workload

// NewWorkload creates a workload namespace; it is removed when the test
// ends, unless the test deleted it first (Delete).
func NewWorkload(t testing.TB) *Workload {
	t.Helper()
	w, err := CreateWorkload()
	if err != nil {
		t.Fatalf("creating a workload namespace: %v", err)
	}
	t.Cleanup(func() { w.Delete() })
	return w
}

// CreateWorkload creates a workload namespace; the caller deletes it.
func CreateWorkload() (*Workload, error) { return sandbox.CreateWorkload() }
