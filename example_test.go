package cninet_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"time"

	cni "github.com/containerd/go-cni"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/cninettest"
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
	for _, n := range status.Interfaces {
		fmt.Println(n.Network, n.IfName, n.Address)
	}
	if err := c.Teardown(ctx, alloc, "/var/run/netns/6b235529"); err != nil {
		log.Print(err) // one error per network that could not be cleaned, joined
	}
}

// GC after a restart: the runner restored web-1 and web-2 is gone, so
// everything of web-2 goes and web-1 keeps all of its state. (Here on
// cninettest's fakes, so that the example runs anywhere.)
func ExampleConfigurator_GC() {
	c, env := fakeConfigurator()
	defer c.Close()
	ctx := context.Background()
	for _, id := range []string{"web-1", "web-2"} {
		if _, err := c.Setup(ctx, &cninet.Allocation{ID: id}, "/var/run/netns/"+id); err != nil {
			log.Fatal(err)
		}
	}
	// A runner killed before it could tear web-2 down: GC finishes it.
	plan, err := c.GC(ctx, []string{"web-1"}, cninet.GCOptions{DryRun: true})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("a dry run would collect:", plan.IDs())
	report, err := c.GC(ctx, []string{"web-1"})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("collected:", report.IDs())
	held, _ := env.Reservations()
	fmt.Println("addresses still held:", held)
	// Output:
	// a dry run would collect: [web-2]
	// collected: [web-2]
	// addresses still held: [198.18.0.2]
}

// Connect attaches a live workload to one more network and Disconnect
// detaches it from one, leaving the others. On cninettest's fakes the
// workload has one network (a second would run real plugins): Connect
// refuses what it cannot do, and Disconnect leaves nothing of it.
func ExampleConfigurator_Connect() {
	c, env := fakeConfigurator()
	defer c.Close()
	ctx := context.Background()
	alloc := &cninet.Allocation{ID: "web-1", Ports: []cninet.Port{{Label: "http", Value: 8080}}}
	netns := "/var/run/netns/web-1"
	if _, err := c.Setup(ctx, alloc, netns); err != nil {
		log.Fatal(err)
	}
	_, err := c.Connect(ctx, alloc, "no-such-network", netns)
	fmt.Println("unknown network:", errors.Is(err, cninet.ErrNetworkNotFound))
	_, err = c.Connect(ctx, alloc, cninettest.Network, netns)
	fmt.Println("attached already:", errors.Is(err, cninet.ErrAlreadyAttached))
	fp := env.CNI.Footprints("web-1")[0]
	fmt.Println("rules and chains:", len(env.Host.Leftovers(fp)))
	if err := c.Disconnect(ctx, alloc, cninettest.Network, netns); err != nil {
		log.Fatal(err)
	}
	fmt.Println("after Disconnect:", len(env.Host.Leftovers(fp)))
	// Output:
	// unknown network: true
	// attached already: true
	// rules and chains: 15
	// after Disconnect: 0
}

// Check after a runner restart: a healthy attachment passes; one the
// plugins find broken is ErrCheckFailed, and the runner rebuilds it.
func ExampleConfigurator_Check() {
	c, env := fakeConfigurator()
	defer c.Close()
	ctx := context.Background()
	alloc := &cninet.Allocation{ID: "web-1"}
	if _, err := c.Setup(ctx, alloc, "/var/run/netns/web-1"); err != nil {
		log.Fatal(err)
	}
	fmt.Println("healthy:", c.Check(ctx, alloc, "/var/run/netns/web-1") == nil)
	env.CNI.CheckErr = errors.New("bridge: veth gone") // what a plugin's CHECK reports
	err := c.Check(ctx, alloc, "/var/run/netns/web-1")
	fmt.Println("broken:", errors.Is(err, cninet.ErrCheckFailed))
	// Output:
	// healthy: true
	// broken: true
}

// Status is a readiness probe: nil when every network can attach
// workloads, else ErrNotReady naming what is wrong.
func ExampleConfigurator_Status() {
	c, env := fakeConfigurator()
	defer c.Close()
	ctx := context.Background()
	fmt.Println("ready:", c.Status(ctx) == nil)
	env.CNI.StatusErr = errors.New("plugin bridge: no such file")
	err := c.Status(ctx, cninettest.Network)
	fmt.Println("not ready:", errors.Is(err, cninet.ErrNotReady))
	// Output:
	// ready: true
	// not ready: true
}

// Every error wraps one of the Err… sentinels: a caller decides with
// errors.Is, whatever the message says.
func Example_errors() {
	c, env := fakeConfigurator()
	defer c.Close()
	ctx := context.Background()
	_, err := c.Setup(ctx, &cninet.Allocation{ID: "not/an/id"}, "/var/run/netns/web-1")
	fmt.Println("bad id:", errors.Is(err, cninet.ErrInvalidAllocation))
	env.CNI.SetupErrs = []error{errors.New("bridge: device busy"), errors.New("bridge: device busy"), errors.New("bridge: device busy")}
	_, err = c.Setup(ctx, &cninet.Allocation{ID: "web-1"}, "/var/run/netns/web-1")
	fmt.Println("every attempt failed:", errors.Is(err, cninet.ErrSetupFailed))
	held, _ := env.Reservations()
	fmt.Println("left behind:", len(held))
	// Output:
	// bad id: true
	// every attempt failed: true
	// left behind: 0
}

// fakeConfigurator is a Configurator on cninettest's fakes, retrying
// three times without waiting, for examples that run anywhere.
func fakeConfigurator() (*cninet.Configurator, *cninettest.Env) {
	dir, err := os.MkdirTemp("", "cninet-example")
	if err != nil {
		log.Fatal(err)
	}
	env, err := cninettest.New(dir)
	if err != nil {
		log.Fatal(err)
	}
	env.Config.Retry = cninet.RetryPolicy{Attempts: 3, BaseDelay: time.Millisecond, MaxDelay: time.Millisecond}
	c, err := cninet.New(env.Config)
	if err != nil {
		log.Fatal(err)
	}
	return c, env
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
	fmt.Println(st.IfName, st.Address, st.AddressIPv6)
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
