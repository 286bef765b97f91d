package thick

import (
	"errors"
	"strings"
	"testing"
)

// The daemon's side of the shim's limits refuses a bad "timeout" as a
// bad request, naming the key.
func TestShimLimitsRefusesABadTimeoutAsABadRequest(t *testing.T) {
	if got, err := ShimLimits(&NetConf{Timeout: "45s"}, CmdAdd); err != nil || got.Timeout.String() != "45s" {
		t.Fatalf("45s: %+v, %v", got, err)
	}
	_, err := ShimLimits(&NetConf{Timeout: "soon"}, CmdAdd)
	if !errors.Is(err, ErrBadRequest) || !strings.Contains(err.Error(), `"timeout"`) || !strings.Contains(err.Error(), "soon") {
		t.Fatalf("got %v", err)
	}
}
