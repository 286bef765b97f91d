package telemetry

import "go.opentelemetry.io/otel/attribute"

// instrumentationName names cninet's tracer and meter: the root package's
// import path, where the operations they observe are.
const instrumentationName = "github.com/seed1280861d/cninet"

// The attributes cninet sets. The cni.* keys are go-cni's, for the same
// meaning, so one query finds both libraries' spans.
const (
	attrID        = attribute.Key("cni.id")          // the allocation (container) id
	attrPath      = attribute.Key("cni.path")        // the network namespace path
	attrIfName    = attribute.Key("cni.ifname")      // the workload's interface in the network
	attrNetwork   = attribute.Key("cni.name")        // the network (conflist) name
	attrNetworks  = attribute.Key("cninet.networks") // the networks a GC sweep covered
	attrOperation = attribute.Key("cninet.operation")
	attrAttempt   = attribute.Key("cninet.attempt")    // 1 for the first ADD
	attrBackoff   = attribute.Key("cninet.backoff")    // seconds waited before this ADD
	attrKind      = attribute.Key("cninet.kind")       // what a removed item was
	attrBackend   = attribute.Key("cninet.backend")    // where it was
	attrRemoved   = attribute.Key("cninet.removed")    // how many items were removed
	attrRemovedBy = attribute.Key("cninet.removed_by") // "<backend> <kind>: <count>", one per group
	attrDetail    = attribute.Key("cninet.detail")     // the removed rule, chain or file
	attrLive      = attribute.Key("cninet.live")       // GC: how many allocations are live
	attrReason    = attribute.Key("cninet.reason")     // why an attachment was kept (cninet.kept)
	attrErrorType = attribute.Key("error.type")        // the sentinel a failure wraps
	attrPlugin    = attribute.Key("cninet.plugin")     // whose footprint a missing piece is
	attrOutcome   = attribute.Key("cninet.outcome")    // how a repair ended
	attrMissing   = attribute.Key("cninet.missing")    // how many pieces a check found missing
	attrRestored  = attribute.Key("cninet.restored")   // how many a repair restored
)
