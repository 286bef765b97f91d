//go:build !unix

package footprint

// lockDir is a no-op where host-local does not run.
func lockDir(string) (func(), error) { return func() {}, nil }
