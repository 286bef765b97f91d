// Package thick is cninet's thick mode: the request a cninet-shim plugin
// forwards to the cninet daemon, how the daemon serves it through a
// cninet.Configurator, and the DEL the shim runs itself when the daemon
// is down.
//
// # Reading order
//
//   - protocol.go: the wire format between shim and daemon: Request (one
//     CNI command as the runtime made it), NetConf (what is read of the
//     shim's config), DecodeRequest and its validation, ErrBadRequest,
//     and the defaults both sides share (DefaultSocket, RequestPath).
//   - server.go: Server, the daemon's HTTP server on a unix socket:
//     Listen, the peer check (root only), the queue of MaxConcurrent
//     slots with each request's deadline, and draining on Shutdown.
//   - serve.go: Serve, one decoded request through the Configurator (ADD
//     is Connect, DEL is Del, CHECK, STATUS, GC), and Del, which the
//     shim also runs itself when the daemon is down.
//   - allocation.go: Allocation, the cninet.Allocation of a request (its
//     CNI_ARGS, port mappings and other runtimeConfig capabilities).
//   - configurator.go: NewConfigurator, the Configurator thick mode
//     serves with: the daemon's conf dir, plugins and libcni cache, and
//     no go-cni.
//   - errors.go: ErrorFor, the CNI error (code, message) the runtime sees
//     for an error of Serve or DecodeRequest, and the daemon's own codes.
//   - info.go: Info, the conf dir, plugin path and cache dir the daemon
//     writes beside its socket, for the shim's DEL while it is down.
//   - convert.go: ConvertResult, the daemon's result in the CNI version
//     of the runtime's config (the shim prints it).
//   - version.go: PluginInfo, the shim's VERSION answer with cninet's
//     version added, and Healthz, the daemon's /healthz ("ok" and the
//     version).
package thick
