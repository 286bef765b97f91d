package cninet_test

import (
	"context"
	"fmt"
	"log"
	"net"

	cni "github.com/containerd/go-cni"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
	"go.opentelemetry.io/otel"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// An allocation runner builds one Configurator at start-up; it knows every
// network in ConfDir, NetworkName being the default.
func ExampleNew() {
	c, err := cninet.New(cninet.Config{
		Logger:      hclog.Default().Named("cni"),
		ConfDir:     "/opt/cni/config",
		NetworkName: "nomad",
		PluginDirs:  []string{"/opt/cni/bin"},
	})
	if err != nil {
		log.Fatal(err) // errors.Is(err, cninet.ErrNetworkNotFound) when the conflist is missing
	}
	defer c.Close()
}

// Setup when the workload starts, Teardown (with the same allocation) when
// it stops.
func ExampleConfigurator_Setup() {
	conf, _ := cninet.BridgeConfList(cninet.DefaultBridgeConfig())
	c, err := cninet.New(cninet.Config{ConfList: conf})
	if err != nil {
		log.Fatal(err)
	}
	alloc := &cninet.Allocation{
		ID:    "6b235529-8111-4bbe-520b-d639b1d2a94e",
		Ports: []cninet.Port{{Label: "http", Value: 28080, To: 8080}},
		Args:  map[string]string{"NOMAD_ALLOC_ID": "6b235529-8111-4bbe-520b-d639b1d2a94e"},
	}
	ctx := context.Background()
	status, err := c.Setup(ctx, alloc, "/var/run/netns/6b235529")
	if err != nil {
		log.Fatal(err) // nothing is left behind: Setup rolled back
	}
	fmt.Println("workload address:", status.Address)
	if err := c.Teardown(ctx, alloc, "/var/run/netns/6b235529"); err != nil {
		log.Print(err) // errors.Is(err, cninet.ErrCleanupFailed): something could not be removed
	}
}

// A workload in two networks: every network in ConfDir is known, and the
// allocation names the ones it joins, in order — "public" on eth0,
// "internal" on eth1. Setup is all or nothing; Teardown detaches both.
func ExampleConfigurator_Setup_twoNetworks() {
	c, err := cninet.New(cninet.Config{
		ConfDir:     "/opt/cni/config", // holds public.conflist and internal.conflist
		NetworkName: "public",          // the default, for allocations that name no network
		PluginDirs:  []string{"/opt/cni/bin"},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	alloc := &cninet.Allocation{
		ID:           "6b235529-8111-4bbe-520b-d639b1d2a94e",
		Ports:        []cninet.Port{{Label: "http", Value: 28080, To: 8080}}, // to the networks with portmap
		NetworkNames: []string{"public", "internal"},
	}
	ctx := context.Background()
	status, err := c.Setup(ctx, alloc, "/var/run/netns/6b235529")
	if err != nil {
		log.Fatal(err) // names the network that failed; the other one was detached again
	}
	for _, n := range status.Attachments {
		fmt.Println(n.Network, n.InterfaceName, n.Address)
	}
	if err := c.Teardown(ctx, alloc, "/var/run/netns/6b235529"); err != nil {
		log.Print(err) // one error per network that could not be cleaned, joined
	}
}

// GC after a restart: everything of the Configurator's networks that no
// live allocation owns is removed.
func ExampleConfigurator_GC() {
	conf, _ := cninet.BridgeConfList(cninet.DefaultBridgeConfig())
	c, err := cninet.New(cninet.Config{ConfList: conf})
	if err != nil {
		log.Fatal(err)
	}
	report, err := c.GC(context.Background(), []string{"6b235529-8111-4bbe-520b-d639b1d2a94e"})
	if err != nil {
		log.Print(err)
	}
	fmt.Println("collected:", report.IDs())
	for it := range report.All() { // one item at a time, however many
		log.Printf("removed %s of %s: %s", it.Kind, it.ID, it.Detail)
	}
}

// OpenTelemetry: cninet depends only on the OpenTelemetry API; the program
// chooses the SDK, exporters and readers. Here spans go to an SDK
// TracerProvider (add trace exporters with sdktrace.WithBatcher) and
// metrics to an SDK MeterProvider (examples/prometheus exports them to
// Prometheus). Installing the TracerProvider globally too makes go-cni's
// own spans (cni.Setup, cni.Remove) appear under cninet's: go-cni always
// uses the global provider.
func ExampleConfig_openTelemetry() {
	tp := sdktrace.NewTracerProvider( /* sdktrace.WithBatcher(exporter) */ )
	defer tp.Shutdown(context.Background())
	reader := sdkmetric.NewManualReader() // or a periodic reader with an exporter
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer mp.Shutdown(context.Background())
	otel.SetTracerProvider(tp)

	conf, _ := cninet.BridgeConfList(cninet.DefaultBridgeConfig())
	c, err := cninet.New(cninet.Config{ConfList: conf, TracerProvider: tp, MeterProvider: mp})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	// Every Setup, Teardown, Check, Status, GC and Reload is now a span
	// (cninet.Setup > cninet.attach > cninet.add > cni.Setup, …) and is
	// counted: cninet.operations, cninet.operation.duration,
	// cninet.cleanup.removed, … (README, "Observability").
}

func ExamplePortMappings() {
	alloc := &cninet.Allocation{ID: "web", Ports: []cninet.Port{{Label: "http", Value: 28080, To: 8080}}}
	mappings, _ := cninet.PortMappings(alloc, false)
	for _, m := range mappings {
		fmt.Printf("%d -> %d/%s\n", m.HostPort, m.ContainerPort, m.Protocol)
	}
	// Output:
	// 28080 -> 8080/tcp
	// 28080 -> 8080/udp
}

func ExampleStatusFromResult() {
	res := &cni.Result{Interfaces: map[string]*cni.Config{
		"nomad":  {IPConfigs: []*cni.IPConfig{{IP: net.ParseIP("198.18.0.1")}}},
		"eth0":   {Sandbox: "/var/run/netns/web", IPConfigs: []*cni.IPConfig{{IP: net.ParseIP("fd00:198:18::2")}, {IP: net.ParseIP("198.18.0.2")}}},
		"veth01": {},
	}}
	st, _ := cninet.StatusFromResult(res)
	fmt.Println(st.InterfaceName, st.Address, st.AddressIPv6)
	// Output: eth0 198.18.0.2 fd00:198:18::2
}

func ExampleBridgeConfList() {
	cfg := cninet.DefaultBridgeConfig()
	cfg.IPv4Subnet = "198.18.0.0/24"
	cfg.BridgeName = "this-name-is-too-long"
	_, err := cninet.BridgeConfList(cfg)
	fmt.Println(err)
	// Output: invalid configuration: bridge name "this-name-is-too-long": want at most 15 bytes matching ^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$
}
