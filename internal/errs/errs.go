package errs

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
)

// All is every kind, for the test that each one is exported.
var All = []*Kind{InvalidAllocation, InvalidArgument, InvalidConfig, NetworkNotFound, PluginMissing, NotReady, Closed, IO}
