// Package workload is what cninet knows of a workload's network
// namespace: whether a path is one (CheckNetNS), its inode,
// whether an attachment still holds the namespace it was made in
// (StillHolds: a DEL may enter it), whether that namespace is provably
// gone (Probe: the one judgement cninet makes of attachments it may not
// collect on an owner's word), and the workload's loopback interface.
//
// Files:
//
//	namespace_linux.go  CheckNetNS, Inode, StillHolds, and the host's facts Probe reads
//	namespace_other.go  The same off Linux: nothing is a namespace, nothing is gone
//	gone.go             Probe: Gone, RecordGone
//	loopback_linux.go   LoopbackUp, SetLoopbackUp
//	loopback_other.go   The same off Linux
package workload
