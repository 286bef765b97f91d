package cninet

import (
	"errors"
	"fmt"
	"strings"

	"github.com/seed1280861d/cninet/internal/footprint"
)

// DriftError is what Check found missing from live attachments, by
// attachment; errors.As reaches it from an ErrCheckFailed error. With
// CheckOptions.Repair it is what is still missing after the repair.
type DriftError struct {
	Drifts []Drift
}

// Drift is what one attachment misses.
type Drift struct {
	// ID is the container id the plugins know the attachment by.
	ID, Network, IfName string
	// Missing names each missing piece: its backend, kind and what it is,
	// e.g. `iptables iptables rule nat CNI-HOSTPORT-DNAT: jump of tcp
	// ports 8080 to CNI-DN-…`.
	Missing []string
	// Unrepairable names those of Missing that cannot be restored while
	// the workload lives (ErrNotRepairable): re-create the workload.
	Unrepairable []string
	// Repaired names what a repair restored (CheckOptions.Repair).
	Repaired []string
}

func (e *DriftError) Error() string {
	parts := make([]string, len(e.Drifts))
	for i, d := range e.Drifts {
		parts[i] = d.String()
	}
	return strings.Join(parts, "; ")
}

// Is makes errors.Is(err, ErrCheckFailed) hold for a DriftError, and
// ErrNotRepairable when something cannot be repaired in place.
func (e *DriftError) Is(target error) bool {
	switch target {
	case ErrCheckFailed:
		return true
	case ErrNotRepairable:
		for _, d := range e.Drifts {
			if len(d.Unrepairable) > 0 {
				return true
			}
		}
	}
	return false
}

func (d Drift) String() string {
	s := fmt.Sprintf("allocation %s in network %q as %s: %d missing: %s", d.ID, d.Network, d.IfName, len(d.Missing), strings.Join(d.Missing, ", "))
	if len(d.Unrepairable) > 0 {
		s += fmt.Sprintf(" (%d cannot be restored in place: re-create the workload)", len(d.Unrepairable))
	}
	return s
}

// driftOf is the Drift of a health that is not whole, with what a
// repair restored.
func driftOf(h footprint.Health, repaired []footprint.Missing) Drift {
	a := h.Live
	d := Drift{ID: a.ID, Network: a.Network, IfName: a.IfName}
	for _, m := range h.Missing {
		d.Missing = append(d.Missing, m.String())
		if m.Restore == footprint.NotInPlace {
			d.Unrepairable = append(d.Unrepairable, m.String())
		}
	}
	for _, m := range repaired {
		d.Repaired = append(d.Repaired, m.String())
	}
	return d
}

// driftError is the ErrCheckFailed error of drifts (nil when none).
func driftError(drifts []Drift) error {
	if len(drifts) == 0 {
		return nil
	}
	return &DriftError{Drifts: drifts}
}

// asDriftError returns the DriftError in err, or nil.
func asDriftError(err error) *DriftError {
	var de *DriftError
	if errors.As(err, &de) {
		return de
	}
	return nil
}
