package cninet

import "errors"

// Sentinel errors. Every error returned by this package wraps at most one of
// them, so callers can branch with errors.Is (or the Is… helpers) without
// parsing messages.
var (
	// ErrInvalidAllocation: the allocation is nil, its ID is not a valid CNI
	// container ID, a port is out of range or duplicated, or an arg is malformed.
	ErrInvalidAllocation = errors.New("invalid allocation")
	// ErrInvalidArgument: an argument other than the allocation is unusable
	// (for example a nil live set for GC).
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrInvalidNetNS: the network namespace path is empty or unusable.
	ErrInvalidNetNS = errors.New("invalid network namespace path")
	// ErrInvalidConfig: a Config, RetryPolicy, BridgeConfig or conflist is
	// malformed. Retrying cannot help.
	ErrInvalidConfig = errors.New("invalid configuration")
	// ErrNetworkNotFound: no conflist in the config directory has the
	// requested network name.
	ErrNetworkNotFound = errors.New("network not found")
	// ErrPluginMissing: a plugin named by the conflist is not in any plugin
	// directory. Retrying cannot help.
	ErrPluginMissing = errors.New("cni plugin missing")
	// ErrSetupFailed: every Setup attempt failed; the attachment was rolled back.
	ErrSetupFailed = errors.New("network setup failed")
	// ErrNoAddress: the CNI result names no usable IP address.
	ErrNoAddress = errors.New("no address in cni result")
	// ErrCheckFailed: CNI CHECK reported the attachment unhealthy; the runner
	// should rebuild the namespace.
	ErrCheckFailed = errors.New("network check failed")
	// ErrCheckUnsupported: CHECK could not be performed (disabled in the
	// conflist, or a plugin version whose CHECK is known to be wrong). It is
	// not a verdict on the attachment's health.
	ErrCheckUnsupported = errors.New("network check not possible")
	// ErrCleanupFailed: Teardown or GC could not remove everything it found.
	ErrCleanupFailed = errors.New("cleanup incomplete")
	// ErrIPTablesMissing: the iptables (or ip6tables) command is not available,
	// so iptables state could not be inspected.
	ErrIPTablesMissing = errors.New("iptables not available")
	// ErrNotReady: Status found the configurator unable to attach workloads.
	ErrNotReady = errors.New("cni not ready")
	// ErrClosed: the Configurator was closed.
	ErrClosed = errors.New("configurator closed")
)

// IsInvalidAllocation reports whether err was caused by a bad allocation.
func IsInvalidAllocation(err error) bool { return errors.Is(err, ErrInvalidAllocation) }

// IsInvalidConfig reports whether err was caused by a bad configuration.
func IsInvalidConfig(err error) bool { return errors.Is(err, ErrInvalidConfig) }

// IsNetworkNotFound reports whether err means the named network does not exist.
func IsNetworkNotFound(err error) bool { return errors.Is(err, ErrNetworkNotFound) }

// IsNoAddress reports whether err means the CNI result had no usable address.
func IsNoAddress(err error) bool { return errors.Is(err, ErrNoAddress) }

// IsCheckFailed reports whether err means the attachment failed CNI CHECK.
func IsCheckFailed(err error) bool { return errors.Is(err, ErrCheckFailed) }
