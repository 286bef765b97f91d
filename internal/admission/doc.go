// Package admission decides who may work on which allocation when: the
// per-allocation locks every cninet call holds, and the guard that keeps a
// GC from collecting an allocation that is busy. It uses nothing of
// cninet; cninet's Setup, Teardown, Connect, Disconnect, Check and GC use
// it.
//
// The locking rule: every call that reads or changes an allocation's
// attachments holds that allocation's lock for its whole run (Enter);
// calls for different allocations run in parallel. GC takes the gate
// alone only while the plugins' GC command runs (it must not race a
// Setup's ADD: LockGate); it takes each dead allocation's lock alone as
// it collects it, and the locks of the dead allocations it sweeps in
// sorted order (LockAll): locks are only ever taken gate first, then
// allocation locks in sorted order, so nothing can deadlock. An
// allocation entered while a GC runs is protected from that GC
// (Protected).
//
// Files:
//
//	admission.go   Control: Enter, the gate, LockAll, and the GC guard
//	keyedmutex.go  Keyed, a lock per key without a global lock, whose
//	               waits a context can bound (cninet daemon's per-container
//	               lock uses it too)
package admission
