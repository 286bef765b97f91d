// Package registry is the host registry: one durable record per
// attachment (one container on one network as one interface), shared by
// every process on the host that attaches workloads through cninet — an
// orchestrator's embedded Configurator, cninet daemon, the shim's own DEL,
// the CLI — and the locks they all honour. A record says whose the
// attachment is (its owner) and holds, before any DEL, every proof its
// cleanup needs, so a process killed at any point loses nothing: the next
// operation on the id, in any process, finishes the work. A record is
// removed only when the cleanup finds nothing of its attachment left.
//
// The registry knows nothing of CNI plugins or of cninet's operations: it
// stores records and locks ids.
//
// Files:
//
//	record.go        Record (keyed by identity.Key), State, Plugin, Damaged: what a record holds
//	boot.go          CurrentBoot: the boot a record was written in
//	registry.go      Registry: Open, Put, Of, All, Remove, RemoveStaleTemps; the layout on disk, read by as many goroutines as CPUs (by the caller alone below 128 ids); a file that is not a record of this format and key never replaced or removed (ErrUnreadable)
//	summary.go       Summaries: every record as a listing shows it, its conflist checked, not kept
//	cache.go         RecordCache, AllCached: All decoding only the files written since the cache saw them (the repair watcher's pass)
//	naming.go        Naming: Summaries of the records that may name one of some addresses, the others not decoded
//	read_unix.go     Reading a record with no system call it does not need; a file's stamp (RecordCache)
//	read_other.go    Reading a record off unix: os.ReadFile
//	write.go         Durable writes: temporary file, fsync, rename, fsync of the directory; every new directory synced into its parent; the disk seam
//	locks.go         The locking rule: LockID, TryLockID, LockGC; RemoveUnusedLocks
//	locks_unix.go    flock(2) locks
//	locks_other.go   No locks off unix
package registry
