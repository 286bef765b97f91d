package errs

import (
	"errors"
	"slices"
)

// Kind is one of package cninet's sentinels as the packages below it
// wrap it. cninet exports each kind as an Err… value of its own, so that
// go doc shows its text, and ties the two at init (Export): errors.Is then
// matches an error wrapping the kind against the exported sentinel.
type Kind struct {
	msg      string
	exported error
}

// Error is the sentinel's text, the same as the exported sentinel's.
func (k *Kind) Error() string { return k.msg }

// Is reports whether target is the sentinel cninet exports for k.
func (k *Kind) Is(target error) bool { return k.exported != nil && target == k.exported }

// Export ties k to the sentinel cninet exports for it. Package cninet
// calls it from its init, before any error is made, and never again.
func (k *Kind) Export(sentinel error) { k.exported = sentinel }

// The kinds the internal packages wrap, documented where package cninet
// exports them (Err…).
var (
	InvalidAllocation = &Kind{msg: "invalid allocation"}
	InvalidArgument   = &Kind{msg: "invalid argument"}
	InvalidConfig     = &Kind{msg: "invalid configuration"}
	NetworkNotFound   = &Kind{msg: "network not found"}
	PluginMissing     = &Kind{msg: "cni plugin missing"}
	NotReady          = &Kind{msg: "cni not ready"}
	Closed            = &Kind{msg: "configurator closed"}
	IO                = &Kind{msg: "host i/o failed"}
	NoAddress         = &Kind{msg: "no address in cni result"}
	Busy              = &Kind{msg: "allocation busy"}
	CleanupFailed     = &Kind{msg: "cleanup incomplete"}
	RecordUnreadable  = &Kind{msg: "host registry record unreadable"}
)

// All is every kind, for the test that each one is exported.
var All = []*Kind{InvalidAllocation, InvalidArgument, InvalidConfig, NetworkNotFound, PluginMissing, NotReady, Closed, IO,
	NoAddress, Busy, CleanupFailed, RecordUnreadable}

// Join is errors.Join that returns a lone error as it is (nils are
// dropped), so that a failure of one part reads as that part's error.
func Join(errs []error) error {
	errs = slices.DeleteFunc(slices.Clone(errs), func(err error) bool { return err == nil })
	if len(errs) == 1 {
		return errs[0]
	}
	return errors.Join(errs...)
}
