package killpoint

import "sync/atomic"

// The points.
const (
	// Recorded: a record of the host registry was written (before an
	// ADD; before a DEL, with its proof).
	Recorded = "recorded"
	// RulesRemoved: a cleanup deleted the rules and chains it planned,
	// not yet the files (reservations, cached results) that prove them.
	RulesRemoved = "rules removed"
	// FilesRemoved: a cleanup deleted the files it planned, not yet its
	// devices and intent records.
	FilesRemoved = "files removed"
)

var hook atomic.Pointer[func(point string)]

// Reached tells the hook, if any, that point was reached.
func Reached(point string) {
	if h := hook.Load(); h != nil {
		(*h)(point)
	}
}

// SetHook has fn told of every point reached from now on (nil: none). Only
// the crash tests set it, in the process they kill.
func SetHook(fn func(point string)) {
	if fn == nil {
		hook.Store(nil)
		return
	}
	hook.Store(&fn)
}
