// Package thickwire is what the cninet-shim and the cninet daemon must
// agree on to talk: the commands, the socket and path, the protocol
// number, the request's head as HTTP headers, the acknowledgement, how
// long the shim waits, the CNI versions and cninet's own error codes,
// the owner names, and the hidden `cninet` subcommand the shim runs its
// DEL with when the daemon gives no answer. It imports only errors,
// strconv and time: the shim links it, and every package a shim links
// is paid for at each of its starts.
//
// # Reading order
//
//   - thickwire.go: the constants, ProtocolFor (the protocol each
//     command is sent in), Limits and ShimLimits (the shim
//     config's "timeout"), IsOwnerName and IsCNIName.
//
// internal/thick builds the daemon's side on it (the request's JSON
// shape, its decoding and validation); cmd/cninet-shim the shim's.
package thickwire
