package attachments

import (
	"slices"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/internal/workload"
)

// KeepLoopback, when found run the loopback plugin, notes whether the
// workload's lo is up (up: the detachment then leaves the loopback
// plugin out of its DELs, Detachment.LoUp) and returns a func that
// brings it up again if a DEL took it down meanwhile — one that could
// not leave the plugin out (an injected Config.CNI). The loopback
// plugin's DEL sets lo down, which is right when the workload goes,
// wrong when it loses one network of several (a Disconnect, a Connect
// rolled back).
func KeepLoopback(logger hclog.Logger, id, netns string, found []Found) (up bool, restore func()) {
	if !slices.ContainsFunc(found, func(fa Found) bool { return runsLoopback(fa.Att) }) {
		return false, func() {}
	}
	start := time.Now()
	if !workload.LoopbackUp(netns) {
		logger.Debug("workload's lo checked", "alloc_id", id, "check", time.Since(start))
		return false, func() {}
	}
	check := time.Since(start)
	return true, func() {
		start := time.Now()
		defer func() {
			logger.Debug("workload's lo checked", "alloc_id", id, "check", check, "restore", time.Since(start))
		}()
		if workload.LoopbackUp(netns) {
			return
		}
		if err := workload.SetLoopbackUp(netns); err != nil {
			logger.Warn("could not bring the workload's loopback interface up again after a DEL of the loopback plugin",
				"alloc_id", id, "netns", netns, "error", err)
		}
	}
}

// runsLoopback reports whether att's chain has the loopback plugin.
func runsLoopback(att Attachment) bool {
	return slices.Contains(att.Conf.Info.PluginTypes, "loopback")
}
