//go:build !unix

package footprint

import "context"

// lockDir is a no-op where host-local does not run.
func lockDir(context.Context, string) (func(), error) { return func() {}, nil }
