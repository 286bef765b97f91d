// Package thick is cninet's thick mode: the request a cninet-shim plugin
// forwards to the cninet daemon, how the daemon serves it through a
// cninet.Configurator, and the DEL `cninet shim-del` runs for the shim
// when the daemon gives none an answer. What the shim and the daemon
// share is in internal/thickwire, which the shim links instead of this
// package.
//
// # Reading order
//
//   - protocol.go: the wire format between shim and daemon: Request (one
//     CNI command as the runtime made it, with the shim's protocol and
//     how long it waits), NetConf (what is read of the shim's config),
//     DecodeRequest and its validation (CheckCNIVersion: the config's
//     cniVersion, CNIVersions), ErrBadRequest, the protocol
//     number and CheckProtocol, the acknowledgement (StatusAcknowledged),
//     and the names both sides share (from thickwire).
//   - head.go: a request's head as HTTP headers (SetHead, RequestHead):
//     what the daemon acknowledges and queues a request by before it
//     reads the body, and the check that the body says the same.
//   - limits.go: how long the shim waits for the daemon: the silence
//     limit, and ShimLimits, the deadline of each command (the shim
//     config's "timeout").
//   - server.go: Server, the daemon's HTTP server on a unix socket:
//     Listen, the peer check (root only), the acknowledgement, the queue
//     of MaxConcurrent slots (and MaxConcurrentProbes for STATUS and
//     CHECK) with each request's deadline (the shim's when sooner), the
//     refusal of requests the shim gave up on (hungUp: noticed without
//     reading the body), the body read once a slot is free, one log line per request,
//     the Gauges, and draining on Shutdown (the ADDs unfinished at its
//     deadline rolled back).
//   - trust.go: what thick mode trusts on disk: PrepareSocketDir and
//     CheckPrivateDir (owned by root, writable by nobody else, never
//     chmodded), the info file read only when root wrote it, and
//     ErrUntrustedPath.
//   - serve.go: Serve, one decoded request through the Configurator (ADD
//     is Connect, DEL is Del, CHECK, STATUS, GC by the valid attachments'
//     interfaces), and Del, which DelForShim also runs.
//   - shimdel.go: DelForShim, the DEL of a request the daemon gave no
//     answer to, as `cninet shim-del` runs it for the shim.
//   - delegateid.go: the delegate id, under which the plugins know a
//     container's second and later interfaces on one network (so one
//     interface's DEL never takes another's chains), found again by
//     each command from the host registry and libcni's cache; the GC's
//     valid attachments named the same way; ADDs of one container
//     serialised.
//   - check.go: CHECK: the runtime's prevResult compared with the
//     delegate's cached result, then the delegate's CHECK.
//   - allocation.go: Allocation, the cninet.Allocation of a request (its
//     CNI_ARGS exactly as sent, port mappings of tcp, udp or sctp, and
//     other runtimeConfig capabilities).
//   - delegates.go: Delegates, the daemon's Configurator of its conf dir:
//     none until the dir holds a conflist (ErrNoDelegates: not ready),
//     reloaded on a change (Watch polls) or SIGHUP, Ready (every delegate
//     network's STATUS); and ConfiguratorForDel, with which a DEL runs the
//     conflist the host registry recorded at the ADD when the conf dir
//     holds none. OnReload tells the readiness cache of a reload.
//   - readiness.go: ReadinessCache, the /readyz verdict of the delegates'
//     STATUS kept for an interval, one run shared by concurrent probes,
//     dropped on a reload.
//   - configurator.go: Configurator, what thick mode calls of a
//     cninet.Configurator (the package depends on that list, not on the
//     concrete type); NewConfigurator, the one it serves with: the
//     daemon's conf dir, plugins and libcni cache, and no go-cni.
//   - errors.go: ErrorFor, the CNI error (code, message) the runtime sees
//     for an error of Serve or DecodeRequest, and the daemon's own codes
//     (CodeIncompatible for a shim of another protocol).
//   - info.go: Info, the conf dir, plugin path and cache dir the daemon
//     writes beside its socket, for the shim's DEL while it is down, and
//     ReadInfo, which trusts it only as trust.go says.
//   - convert.go: answerResult, the delegate's result in the CNI version
//     of the runtime's config, which the shim prints as it comes.
//   - version.go: Healthz, the daemon's /healthz ("ok" and the version).
package thick
