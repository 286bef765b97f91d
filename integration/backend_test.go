package integration

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// Debian's plugins (1.1.1) have no nftables backends and would silently
// fall back to iptables; Status says so, naming the plugins. Upstream's
// v1.9.1 have them.
func TestStatusKnowsWhichInstalledPluginsHaveTheNFTablesBackends(t *testing.T) {
	eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
		nft := set
		nft.Backend = cninet.BackendNFTables
		c := newConfigurator(t, set, newNetwork(t, nft, false).conf)
		err := c.Status(ctxFor(t, time.Minute))
		if strings.HasPrefix(set.Name, "debian") {
			if !errors.Is(err, cninet.ErrNotReady) || !strings.Contains(fmtErr(err), "plugin bridge cannot provide") ||
				!strings.Contains(fmtErr(err), "plugin portmap cannot provide") {
				t.Fatalf("Status = %v, want not ready, naming bridge and portmap", err)
			}
			return
		}
		if err != nil {
			t.Fatalf("Status = %v, want ready", err)
		}
	})
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
