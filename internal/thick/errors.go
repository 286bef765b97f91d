package thick

import (
	"context"
	"errors"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/seed1280861d/cninet"
)

// The error codes the daemon answers with besides the CNI spec's own
// (a delegate plugin's code always passes through unchanged).
const (
	CodeAlreadyAttached uint = 100 // ADD of an attachment that exists
	CodeCheckFailed     uint = 101 // CHECK found the attachment unhealthy
	CodeCleanupFailed   uint = 102 // DEL or GC could not remove everything
	CodeSetupFailed     uint = 103 // ADD failed without a plugin's error code
	CodeIncompatible    uint = 104 // the shim speaks a protocol the daemon does not
	// CodeRecordUnreadable: the host registry's record of the attachment
	// cannot be read (damaged, or a newer cninet's): it is kept, and
	// nothing ran.
	CodeRecordUnreadable uint = 105
)

// ErrorFor turns an error of Serve or DecodeRequest into the CNI error the
// runtime sees. A delegate plugin's CNI error keeps its code and message
// (cninet's account of it goes to Details); cninet's own errors get the
// spec's code where one fits (1 incompatible CNI version, 4 bad environment, 6 undecodable, 7 bad
// network config, 11 try again later, 50 not ready) and the codes above
// otherwise.
func ErrorFor(err error) *types.Error {
	if err == nil {
		return nil
	}
	var plugin *types.Error
	if errors.As(err, &plugin) {
		return &types.Error{Code: plugin.Code, Msg: plugin.Msg, Details: err.Error()}
	}
	return &types.Error{Code: codeFor(err), Msg: err.Error()}
}

func codeFor(err error) uint {
	switch {
	case errors.Is(err, cninet.ErrRecordUnreadable): // whatever else it wraps: nothing ran
		return CodeRecordUnreadable
	case errors.Is(err, ErrIncompatibleCNIVersion):
		return types.ErrIncompatibleCNIVersion
	case errors.Is(err, errMalformed):
		return types.ErrDecodingFailure
	case errors.Is(err, ErrBadRequest), errors.Is(err, cninet.ErrInvalidAllocation), errors.Is(err, cninet.ErrInvalidArgument):
		return types.ErrInvalidEnvironmentVariables
	case errors.Is(err, cninet.ErrNotReady):
		return types.ErrPluginNotAvailable
	case errors.Is(err, cninet.ErrNetworkNotFound), errors.Is(err, cninet.ErrInvalidConfig), errors.Is(err, cninet.ErrPluginMissing):
		return types.ErrInvalidNetworkConfig
	case errors.Is(err, ErrBusy), errors.Is(err, context.DeadlineExceeded), errors.Is(err, cninet.ErrXtablesLock):
		return types.ErrTryAgainLater
	case errors.Is(err, cninet.ErrAlreadyAttached):
		return CodeAlreadyAttached
	case errors.Is(err, cninet.ErrCheckFailed):
		return CodeCheckFailed
	case errors.Is(err, cninet.ErrCleanupFailed), errors.Is(err, ErrUntrustedPath):
		// Only the shim's own DEL meets an untrusted info file: it did not
		// run, and a DEL again (through the daemon) finishes it.
		return CodeCleanupFailed
	case errors.Is(err, ErrIncompatibleShim):
		return CodeIncompatible
	case errors.Is(err, cninet.ErrSetupFailed), errors.Is(err, cninet.ErrNoAddress):
		return CodeSetupFailed
	}
	return types.ErrInternal
}

// ErrBusy: the daemon is draining or the request's deadline passed while
// it waited for a slot; the runtime should try again later.
var ErrBusy = errors.New("cninet daemon busy")

// errMalformed marks a body that is not JSON of the request's shape.
var errMalformed = errors.New("malformed JSON")
