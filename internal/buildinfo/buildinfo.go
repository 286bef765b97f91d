package buildinfo

import (
	"runtime/debug"
	"sync"
)

// Module is cninet's module path: the main module of its own binaries,
// a dependency of an importer's.
const Module = "github.com/seed1280861d/cninet"

// devel is what Version says when the build recorded no version: a
// binary built by `go run` or `go build` outside a module cache.
const devel = "(devel)"

var version = sync.OnceValue(func() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return devel
	}
	return versionOf(info)
})

// Version returns cninet's version as the Go toolchain recorded it in the
// running binary: a release tag (v0.1.0), a pseudo-version naming the
// commit, or "(devel)" when the build recorded none.
func Version() string { return version() }

// versionOf finds cninet's version in a binary's build info: the main
// module's when cninet is the main module (its own binaries), else the
// dependency's (a program that imports it).
func versionOf(info *debug.BuildInfo) string {
	if info.Main.Path == Module {
		return orDevel(info.Main.Version)
	}
	for _, dep := range info.Deps {
		if dep.Path == Module {
			if dep.Replace != nil {
				return orDevel(dep.Replace.Version)
			}
			return orDevel(dep.Version)
		}
	}
	return devel
}

func orDevel(v string) string {
	if v == "" {
		return devel
	}
	return v
}
