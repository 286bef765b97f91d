// Cninet-shim is a CNI plugin (type "cninet-shim") that hands every
// request of a CNI runtime to the cninet daemon (cninet daemon) over its
// unix socket, so that the runtime's workloads get cninet's
// neighbour-safe, leak-free attachments. The conflist's "socket" names
// the daemon's socket (default /run/cninet/cninet.sock); the daemon runs
// its own conflist of the same name. It speaks CNI 0.3.0 to 1.1.0 and
// prints results in the version of the config it was given (the daemon
// sends them so). It never waits on the daemon without bound: a daemon
// silent past the silence limit (5s), or without an answer past the
// config's "timeout", is one that did not answer. A DEL the daemon does
// not answer (down, stopped, stalled) still detaches and cleans up: the
// shim runs `cninet shim-del` for it (the config's "cninet", else the
// cninet beside the shim, once checked that only root could have put it
// there), within the config's "timeout"; an answer, an error or one it
// cannot read included, always goes to the runtime. See
// docs/thick-mode.md.
//
// The shim is exec'd for every CNI command, so it links only what it
// needs to speak CNI and HTTP over the socket (cmd/cninet's deps_test
// holds the list): no os, fmt, reflect, net, encoding/json or CNI
// library, and of cninet only internal/thickwire. The few bytes of JSON
// and HTTP/1.1 it needs it reads and writes itself, and tests hold them
// to what encoding/json, net/http and skel do.
//
// # Reading order
//
//   - main.go: main, cninet's version in the VERSION answer, and plain
//     reads and writes of the standard streams.
//   - cni.go: the CNI front, as libcni's skel reads a plugin's
//     environment and stdin (the same checks, the same codes, in the
//     same order), and cniError, printed as skel prints one.
//   - shim.go: the commands: the request (the runtime's command as the
//     daemon decodes it, in the protocol it needs), forward (one request
//     to the daemon, sent while waiting for its acknowledgement within
//     the silence limit and for its answer until the deadline; the
//     daemon's CNI error passed on unchanged), noAnswer and the CNI code
//     of a daemon that gave none, and of an answer that cannot be read.
//   - config.go: what the shim reads of its config: the "socket", the
//     "timeout" and "cninet".
//   - fallback.go: a DEL the daemon gave no answer to, run by `cninet
//     shim-del` (found, exec'd by its descriptor, killed at the
//     "timeout"), whose answer is passed on.
//   - executable.go: openExecutable, the walk down cninet's path that
//     opens it only when nobody but root could have put it there.
//   - conn.go: stream, the unix socket (and the pipes to cninet): what
//     is to be sent sent while waiting to read, each wait bounded by the
//     time left (poll).
//   - http.go: the POST and the answers, as HTTP/1.1 has them; what is
//     not an answer, and an answer cut short.
//   - json.go: reading a JSON object's string members as encoding/json
//     reads them, and writing strings as it writes them.
//   - version.go: cninet's version from the executable's build info.
//   - times.go: the moments of each step, for the benchmarks'
//     breakdown (CNINET_SHIM_TIMES).
//
// What the shim and the daemon must agree on is in internal/thickwire.
package main
