package netsandbox

import "github.com/seed1280861d/cninet/internal/sandbox"

// Snapshot is the state an attachment can leave on a host.
type Snapshot = sandbox.Snapshot

// Allowance says what shared infrastructure a test's configuration
// creates besides the shared chains: its admin chain and bridge.
type Allowance = sandbox.Allowance

// TakeSnapshot reads what attachments can leave on a host: see
// sandbox.TakeSnapshot.
func TakeSnapshot() (Snapshot, error) { return sandbox.TakeSnapshot() }

// Leaks returns what is in now but not in baseline and is not shared
// infrastructure: see sandbox.Leaks.
func Leaks(baseline, now Snapshot, allow Allowance) []string {
	return sandbox.Leaks(baseline, now, allow)
}
