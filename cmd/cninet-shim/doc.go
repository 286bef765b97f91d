// Cninet-shim is a CNI plugin (type "cninet-shim") that hands every
// request of a CNI runtime to the cninet daemon (cninet daemon) over its
// unix socket, so that the runtime's workloads get cninet's
// neighbour-safe, leak-free attachments. The conflist's "socket" names
// the daemon's socket (default /run/cninet/cninet.sock); the daemon runs
// its own conflist of the same name. It speaks CNI 0.3.0 to 1.1.0 and
// prints results in the version of the config it was given. It never
// waits on the daemon without bound: a daemon silent past the silence
// limit (5s), or without an answer past the config's "timeout", is one
// that did not answer. A DEL the daemon does not answer (down, stopped,
// stalled) still detaches and cleans up, in this process; an answer, an
// error included, always goes to the runtime as it is. See
// docs/thick-mode.md.
//
// # Reading order
//
//   - main.go: the CNI versions the shim accepts (its VERSION answer
//     names cninet's version too), and main, which hands each CNI command
//     to the shim through skel.
//   - shim.go: the shim: its config (the "socket", the "timeout"),
//     forward (one request to the daemon over HTTP on the unix socket,
//     waiting for its acknowledgement within the silence limit and for
//     its answer until the deadline; the daemon's CNI error passed on
//     unchanged), noAnswer and the CNI code of a daemon that gave none,
//     and del, which runs the DEL in this process (internal/thick's Del,
//     with the daemon's info file only when root wrote it) when the
//     daemon gave no answer.
//
// The request and its validation, the daemon's info file and the result
// conversion live in internal/thick, shared with the daemon.
package main
