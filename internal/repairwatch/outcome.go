package repairwatch

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/internal/footprint"
)

// What a repair did, the watcher's and Check's (CheckOptions.Repair)
// alike: what it restored that a check after it finds there, and its
// log line.

// Restored is what of restored the check after the repair finds there:
// a piece its restoring did not bring back is not repaired.
func Restored(restored []footprint.Missing, after footprint.Health) []footprint.Missing {
	still := map[string]bool{}
	for _, m := range after.Missing {
		still[m.String()] = true
	}
	var out []footprint.Missing
	for _, m := range restored {
		if !still[m.String()] {
			out = append(out, m)
		}
	}
	return out
}

// LogRepair writes a repair's line: of l, what it restored (repaired),
// after (the check after it), and what is still missing and why (err).
func LogRepair(logger hclog.Logger, l *footprint.Live, after footprint.Health, repaired []footprint.Missing, err error, took time.Duration) {
	items := make([]string, len(repaired))
	for i, m := range repaired {
		items[i] = m.String()
	}
	switch {
	case errors.Is(err, footprint.ErrNotInPlace):
		logger.Error("attachment cannot be repaired in place: re-create the workload", "alloc_id", l.ID, "network", l.Network,
			"ifname", l.IfName, "error", err)
	case len(after.Missing) > 0:
		logger.Error("attachment repair incomplete", "alloc_id", l.ID, "network", l.Network, "ifname", l.IfName,
			"restored", items, "still_missing", missingOf(after), "error", err, "duration", took)
	default:
		logger.Info("attachment repaired", "alloc_id", l.ID, "network", l.Network, "ifname", l.IfName,
			"restored", items, "duration", took)
	}
}

// missingOf names each piece h found missing.
func missingOf(h footprint.Health) []string {
	var out []string
	for _, m := range h.Missing {
		out = append(out, m.String())
	}
	return out
}

// describe says what h found missing, as cninet.Drift's String does: the
// error a repair that restored nothing is reported with.
func describe(h footprint.Health) string {
	l := h.Live
	s := fmt.Sprintf("allocation %s in network %q as %s: %d missing: %s", l.ID, l.Network, l.IfName, len(h.Missing),
		strings.Join(missingOf(h), ", "))
	if !h.InPlace() {
		n := 0
		for _, m := range h.Missing {
			if m.Restore == footprint.NotInPlace {
				n++
			}
		}
		s += fmt.Sprintf(" (%d cannot be restored in place: re-create the workload)", n)
	}
	return s
}
