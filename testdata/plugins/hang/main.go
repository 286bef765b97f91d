// Command hang is a CNI plugin for tests whose ADD never returns: libcni
// must kill it when the caller's context expires. DEL and CHECK pass.
package main

import (
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"
)

func add(*skel.CmdArgs) error {
	for {
		time.Sleep(time.Hour) // not select{}: the runtime would call that a deadlock and exit
	}
}

func pass(*skel.CmdArgs) error { return nil }

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{Add: add, Del: pass, Check: pass}, version.All, "hang: ADD never returns")
}
