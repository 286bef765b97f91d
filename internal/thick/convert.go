package thick

import (
	"encoding/json"
	"fmt"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
)

// ConvertResult reads a CNI result in whatever version it names (its
// "cniVersion") and returns it as version to, the version of the config
// the runtime gave: a 1.0.0 delegate's result reaches a runtime that wrote
// a 0.4.0 conflist as a 0.4.0 result. A result that cannot be read or
// converted is an error naming both versions.
func ConvertResult(body []byte, to string) (types.Result, error) {
	var head struct {
		CNIVersion string `json:"cniVersion"`
	}
	if err := json.Unmarshal(body, &head); err != nil {
		return nil, fmt.Errorf("%w: the daemon's result is not JSON: %w", errMalformed, err)
	}
	if head.CNIVersion == "" {
		return nil, fmt.Errorf("%w: the daemon's result names no cniVersion", errMalformed)
	}
	res, err := version.NewResult(head.CNIVersion, body)
	if err != nil {
		return nil, fmt.Errorf("reading a %s result: %w", head.CNIVersion, err)
	}
	out, err := res.GetAsVersion(to)
	if err != nil {
		return nil, fmt.Errorf("converting a %s result to %s: %w", head.CNIVersion, to, err)
	}
	return out, nil
}
