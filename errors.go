package cninet

import (
	"errors"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/errs"
)

// Every error an exported function or method of this package returns wraps
// at least one of the sentinels below, and keeps its cause (a plugin's
// error, an fs error, a context error) reachable through errors.Is and
// errors.As: branch on the sentinel, inspect the cause, never parse the
// message.
var (
	// ErrInvalidAllocation: the allocation is nil, its ID is not a valid CNI
	// container ID, a port is out of range or duplicated, or an arg is
	// malformed. Nothing on the host was changed.
	ErrInvalidAllocation = errors.New("invalid allocation")
	// ErrInvalidArgument: an argument other than the allocation is unusable
	// (an empty network namespace path, a nil live set for GC). Nothing on
	// the host was changed.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrInvalidConfig: a Config, RetryPolicy, BridgeConfig or conflist is
	// malformed, or ConfDir cannot be read. Retrying cannot help.
	ErrInvalidConfig = errors.New("invalid configuration")
	// ErrNetworkNotFound: no conflist in the config directory has the
	// requested network name, or an allocation names a network the
	// Configurator does not know (the error lists the known ones).
	ErrNetworkNotFound = errors.New("network not found")
	// ErrPluginMissing: a plugin named by the conflist is not in any plugin
	// directory. Retrying cannot help.
	ErrPluginMissing = errors.New("cni plugin missing")
	// ErrNoNetNS: the network namespace path given to Setup, Connect or
	// Check does not exist or is not a network namespace. It comes
	// wrapped in ErrInvalidArgument from Setup and Connect (create the
	// namespace first, or pass the right path) and in ErrCheckFailed from
	// Check (the workload's namespace is gone: rebuild it). No plugin ran
	// and nothing is retried.
	ErrNoNetNS = errors.New("no such network namespace")
	// ErrSetupFailed: every Setup (or Connect) attempt failed, or ctx was
	// done, or a result had no usable address; the attachment was rolled
	// back.
	ErrSetupFailed = errors.New("network setup failed")
	// ErrAlreadyAttached: Connect was asked for a network the workload is
	// already attached to (the error names its interface). Nothing on the
	// host was changed.
	ErrAlreadyAttached = errors.New("network already attached")
	// ErrNoAddress: the CNI result names no usable IP address.
	ErrNoAddress = errors.New("no address in cni result")
	// ErrCheckFailed: CNI CHECK reported the attachment unhealthy; the runner
	// should rebuild the namespace.
	ErrCheckFailed = errors.New("network check failed")
	// ErrCheckUnsupported: a plugin's own CHECK could not be performed
	// (disabled in the conflist, or an injected Config.CNI whose whole
	// chain includes a plugin whose CHECK is known to be wrong). It is no
	// verdict on the attachment's health, and never hides drift cninet's
	// own check sees: that is ErrCheckFailed.
	ErrCheckUnsupported = errors.New("network check not possible")
	// ErrNotRepairable: Check's repair (CheckOptions.Repair) found
	// something that cannot be restored while the workload lives — its
	// namespace, its interface or an address on it, the host's end of its
	// veth, an address host-local has given to another workload since.
	// It comes wrapped in ErrCheckFailed with a *DriftError naming it
	// (Drift.Unrepairable); nothing was repaired. Re-create the workload.
	ErrNotRepairable = errors.New("drift cannot be repaired in place")
	// ErrBusy: another operation on the same allocation, in this process
	// or another one on the host, held its lock until ctx was done (or
	// two minutes passed), or a GC held the host's GC lock while Setup or
	// Connect waited to ADD. Nothing on the host was changed; retry later.
	ErrBusy = errors.New("allocation busy")
	// ErrCleanupFailed: Teardown or GC could not remove everything it found.
	ErrCleanupFailed = errors.New("cleanup incomplete")
	// ErrIPTablesMissing: the iptables (or ip6tables) command is not
	// available, so iptables state could not be inspected. It comes wrapped
	// in ErrCleanupFailed.
	ErrIPTablesMissing = host.ErrIPTablesMissing
	// ErrXtablesLock: an iptables command of a cleanup (Teardown, GC,
	// Setup's retries and rollback) could not have the xtables lock, which
	// iptables-legacy (not iptables-nft) takes for every listing and
	// change: another process held it until the call's deadline (without
	// one, host.DefaultLockWait), or the lock file could not be opened. The
	// error names the lock file ($XTABLES_LOCKFILE, else
	// /run/xtables.lock), how long the command waited and, where the
	// kernel tells, the holder's pid; it wraps the context's error when
	// the context ended. Nothing that command would have changed was
	// changed: Teardown (or GC) again, once the lock is free, finishes the
	// cleanup. It comes wrapped in ErrCleanupFailed.
	ErrXtablesLock = host.ErrXtablesLock
	// ErrRecordUnreadable: the host registry holds a file where an
	// attachment's record belongs that this cninet cannot read — damaged,
	// or written by a newer cninet (a later format). It is kept byte for
	// byte: Setup and Connect of that attachment fail before any plugin
	// runs, and Teardown, Disconnect and GC leave the attachment alone.
	// The error names the file. Upgrade cninet, or, when the file is
	// damaged, remove it and Teardown the allocation again.
	ErrRecordUnreadable = errors.New("host registry record unreadable")
	// ErrNotReady: Status found the configurator unable to attach workloads.
	ErrNotReady = errors.New("cni not ready")
	// ErrClosed: the Configurator was closed.
	ErrClosed = errors.New("configurator closed")
	// ErrIO: reading or writing host state that is not a conflist's content
	// failed (writing a conflist file, closing the ConfDir watcher).
	ErrIO = errors.New("host i/o failed")
)

// The kinds of error the internal packages wrap are these sentinels:
// errors.Is(err, ErrInvalidConfig) holds for an error of theirs that
// wraps errs.InvalidConfig.
func init() {
	errs.InvalidAllocation.Export(ErrInvalidAllocation)
	errs.InvalidArgument.Export(ErrInvalidArgument)
	errs.InvalidConfig.Export(ErrInvalidConfig)
	errs.NetworkNotFound.Export(ErrNetworkNotFound)
	errs.PluginMissing.Export(ErrPluginMissing)
	errs.NotReady.Export(ErrNotReady)
	errs.Closed.Export(ErrClosed)
	errs.IO.Export(ErrIO)
	errs.NoAddress.Export(ErrNoAddress)
	errs.Busy.Export(ErrBusy)
	errs.CleanupFailed.Export(ErrCleanupFailed)
	errs.RecordUnreadable.Export(ErrRecordUnreadable)
}
