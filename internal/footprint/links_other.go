//go:build !linux

package footprint

import "errors"

// NewHostLinks fails where there are no Linux network devices.
func NewHostLinks() (Links, error) { return nil, errors.New("network devices are Linux only") }
