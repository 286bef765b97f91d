// Command hang is a CNI plugin for tests whose ADD never returns, chained
// after the real plugins: libcni must kill it when the caller's context
// expires, and the caller must then undo what the plugins before it did.
// DEL and CHECK succeed.
package main

import (
	"time"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"
)

func add(*skel.CmdArgs) error {
	for {
		// Not select{}: with no other goroutine the runtime would call that
		// a deadlock and exit, which is not hanging.
		time.Sleep(time.Hour)
	}
}

func pass(*skel.CmdArgs) error { return nil }

func main() {
	skel.PluginMainFuncs(skel.CNIFuncs{Add: add, Del: pass, Check: pass}, version.All, "hang: ADD never returns")
}
