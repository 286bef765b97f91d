package workload

import (
	"sync"

	"github.com/seed1280861d/cninet/internal/registry"
)

// An attachment is dead, whoever made it, once the network namespace it
// was made in is gone: nothing of a workload can live without it. That
// is the one judgement cninet makes of attachments it may not collect on
// an owner's word — another owner's (a DEL libcni's GC sends for every
// cached attachment it was not told is valid), and state no record
// claims (another tool's, or from before the registry). It must never
// take a live one for dead: where the host cannot prove the namespace
// gone, it lives.

// Probe judges whether attachments' namespaces are gone. It reads which
// namespaces the host's processes and mounts hold at most once: a GC
// asks for thousands. The zero value is ready to use; a Probe is for one
// operation (what it read goes stale) and one goroutine.
type Probe struct {
	once sync.Once
	held map[uint64]bool // the inodes of the network namespaces processes and mounts hold
}

// RecordGone reports whether the namespace of rec's attachment is
// provably gone: the record was written in an earlier boot, or its
// namespace path no longer reaches the namespace it names (and no
// process or mount holds that one).
func (n *Probe) RecordGone(rec registry.Record) bool {
	return rec.FromEarlierBoot() || n.Gone(rec.NetNS, rec.NetNSInode)
}

// Gone reports whether the network namespace an attachment was made in,
// at path (its inode when known, else 0), is provably gone: path is no
// network namespace any more, or another one than the attachment's (of
// another inode, or the caller's own, in which no workload lives), and
// no process or mount of this host holds the attachment's. An empty
// path, or one that cannot be read, proves nothing.
func (n *Probe) Gone(path string, inode uint64) bool {
	if path == "" {
		return false
	}
	now, err := netnsAt(path)
	switch {
	case err == nil && inode != 0 && now == inode:
		return false
	case err == nil && inode == 0 && now != ownNetns():
		return false // a namespace is there, and nothing says it is another
	case err != nil && !netnsAbsent(err):
		return false // unreadable: proves nothing
	}
	if inode == 0 {
		return true
	}
	n.once.Do(func() { n.held = heldNetns() })
	return !n.held[inode]
}
