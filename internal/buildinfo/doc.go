// Package buildinfo tells which version of cninet is running, from what
// the Go toolchain recorded in the binary: `cninet version`, the shim's
// VERSION answer and the daemon's /healthz all say the same.
//
// Files:
//
//	buildinfo.go  Version, from runtime/debug's build info
package buildinfo
