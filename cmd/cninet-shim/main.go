// Command cninet-shim is a CNI plugin (type "cninet-shim") that hands
// every request of a CNI runtime to the cninet daemon (cninet daemon) over
// its unix socket, so that the runtime's workloads get cninet's
// neighbour-safe, leak-free attachments. The conflist's "socket" names
// the daemon's socket (default /run/cninet/cninet.sock); the daemon runs
// its own conflist of the same name. It speaks CNI 0.3.0 to 1.1.0 and
// prints results in the version of the config it was given. A DEL while
// the daemon is down still detaches and cleans up, in this process. See
// the README's "Thick mode".
package main

import (
	"os"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/version"
)

// supported are the CNI versions the shim accepts in a config.
var supported = version.PluginSupports("0.3.0", "0.3.1", "0.4.0", "1.0.0", "1.1.0")

func main() {
	s := newShim(os.Stdout)
	skel.PluginMainFuncs(skel.CNIFuncs{Add: s.add, Del: s.del, Check: s.check, Status: s.status, GC: s.gc},
		supported, "cninet-shim: forwards CNI requests to the cninet daemon")
}
