//go:build !linux

package links

import (
	"errors"

	"github.com/seed1280861d/cninet/host"
)

// New fails where there are no Linux network devices.
func New() (host.Links, error) { return nil, errors.New("network devices are Linux only") }
