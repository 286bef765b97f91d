//go:build !linux

package links

import "errors"

// New fails where there are no Linux network devices.
func New() (Links, error) { return nil, errors.New("network devices are Linux only") }
