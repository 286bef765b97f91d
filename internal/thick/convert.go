package thick

import (
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
)

// answerResult is the ADD's answer: the delegate's result res in version
// to, the CNI version of the runtime's config (a 1.0.0 delegate's result
// reaches a runtime that wrote a 0.4.0 conflist as a 0.4.0 result),
// printed as a plugin prints it, so that the shim passes it on unread
// (protocol 3). A result that cannot be converted is an error naming
// both versions.
func answerResult(res types.Result, to string) ([]byte, error) {
	out, err := res.GetAsVersion(to)
	if err != nil {
		return nil, fmt.Errorf("%w: converting the delegate's %s result to the config's %s: %w", errMalformed, res.Version(), to, err)
	}
	var b strings.Builder
	if err := out.PrintTo(&b); err != nil {
		return nil, fmt.Errorf("%w: encoding the result: %w", errMalformed, err)
	}
	return []byte(b.String()), nil
}
