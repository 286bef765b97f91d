// Package gc is cninet's GC: every dead attachment of an owner detached
// as Teardown detaches it, then a sweep of what no record or cache
// remembers, by the ownership rule.
//
// Collector.Collect runs one GC of everything but the live allocations,
// as a Scope (package cninet's GCOptions, checked) narrows it, and
// returns a Report of what it removed (package cninet renders it as a
// GCReport). It detaches through package attachments' Detacher and
// sweeps through the footprint package; it reads libcni's cache and
// sends the plugins' GC command through libcni, takes the host
// registry's locks, and probes whether namespaces are gone (package
// workload). It knows nothing of the Configurator.
//
// Files, from the entry point down:
//
//	doc.go       This overview.
//	collect.go   Collector.Collect: the recorded, then the cached dead attachments detached, then the sweep, then the registry's housekeeping.
//	sweep.go     The sweep, under the host's GC lock: what the registry and libcni's cache claim now is left.
//	cached.go    The stale attachments libcni's cache holds, each under its id's lock, unrecorded ones only once their namespace is gone; the CNI GC command under the host's GC lock.
//	recorded.go  The dead recorded attachments (this owner's, any owner's of an earlier boot), each under its id's lock.
//	run.go       Collector (GC's parts) and run: one GC, what is live, which networks it collects, what it removed.
//	report.go    Scope: what one GC is asked; Report: what it removed; its progress in the log.
package gc
