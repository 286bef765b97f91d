package main

import (
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/seed1280861d/cninet/internal/buildinfo"
	"github.com/seed1280861d/cninet/internal/thick"
)

// supported are the CNI versions the shim accepts in a config; its
// VERSION answer carries cninet's version too.
var supported = thick.PluginInfo(thick.CNIVersions...)

func main() {
	s := newShim(os.Stdout)
	skel.PluginMainFuncs(skel.CNIFuncs{Add: s.add, Del: s.del, Check: s.check, Status: s.status, GC: s.gc},
		supported, "cninet-shim "+buildinfo.Version()+": forwards CNI requests to the cninet daemon")
}
