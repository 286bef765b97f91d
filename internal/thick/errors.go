package thick

import (
	"context"
	"errors"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/thickwire"
)

// The error codes the daemon answers with besides the CNI spec's own
// (a delegate plugin's code always passes through unchanged).
const (
	CodeAlreadyAttached  = thickwire.CodeAlreadyAttached  // ADD of an attachment that exists
	CodeCheckFailed      = thickwire.CodeCheckFailed      // CHECK found the attachment unhealthy
	CodeCleanupFailed    = thickwire.CodeCleanupFailed    // DEL or GC could not remove everything
	CodeSetupFailed      = thickwire.CodeSetupFailed      // ADD failed without a plugin's error code
	CodeIncompatible     = thickwire.CodeIncompatible     // the shim speaks a protocol the daemon does not
	CodeRecordUnreadable = thickwire.CodeRecordUnreadable // the attachment's record cannot be read: kept, nothing ran
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
		// Only the DEL cninet runs for the shim meets an untrusted info file: it did not
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
