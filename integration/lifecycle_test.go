package integration

import (
	"testing"
	"time"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/netsandbox"
)

func TestSetupServesThroughTheMappedPortAndTeardownLeavesNothing(t *testing.T) {
	for _, dual := range []bool{false, true} {
		name := "ipv4"
		if dual {
			name = "dual stack"
		}
		t.Run(name, func(t *testing.T) {
			eachPluginSet(t, func(t *testing.T, set netsandbox.PluginSet) {
				nw := newNetwork(t, set, dual)
				c := newConfigurator(t, set, nw.conf)
				base := baseline(t)
				w := netsandbox.NewWorkload(t)
				alloc := &cninet.Allocation{ID: "web-1", Ports: []cninet.Port{{Label: "http", Value: 28080, To: 8080}}}
				st, err := c.Setup(ctxFor(t, time.Minute), alloc, w.Path)
				if err != nil {
					t.Fatal(err)
				}
				if st.InterfaceName != "eth0" || !st.Address.Is4() || (dual && !st.AddressIPv6.Is6()) || (!dual && st.AddressIPv6.IsValid()) {
					t.Fatalf("status %+v", st)
				}
				serveHTTP(t, w, 8080, "web-1")
				if body, err := fetch(nw.gw4, 28080); err != nil || body != "hello from web-1" {
					t.Fatalf("IPv4 via the mapped port: %q, %v", body, err)
				}
				if dual {
					if body, err := fetch(nw.gw6, 28080); err != nil || body != "hello from web-1" {
						t.Fatalf("IPv6 via the mapped port: %q, %v", body, err)
					}
				}
				if err := c.Teardown(ctxFor(t, time.Minute), alloc, w.Path); err != nil {
					t.Fatal(err)
				}
				w.Delete()
				assertNoLeaks(t, base, nw.allowance())
			})
		})
	}
}
