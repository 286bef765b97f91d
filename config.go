package cninet

import (
	"context"
	"os"
	"path/filepath"
	"time"

	cni "github.com/containerd/go-cni"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/links"
	"github.com/seed1280861d/cninet/internal/registry"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
)

// Config configures a Configurator. The zero value of each field selects
// the documented default; ConfList, ConfLists or ConfDir must give at
// least one network.
type Config struct {
	// Logger receives one line per Setup attempt and a warning for every
	// leaked item Teardown had to remove. nil: a null logger.
	Logger hclog.Logger
	// PluginDirs are searched for plugin binaries. nil:
	// filepath.SplitList($CNI_PATH), else /opt/cni/bin.
	PluginDirs []string
	// InterfacePrefix names the workload's interface (prefix + "0"). "": "eth".
	InterfacePrefix string
	// ConfDir holds the networks' conflists: every network in it is known
	// (the first file of a name wins, as with LoadConfList), and
	// NetworkName is the default network, the one an Allocation that names
	// no network joins. Without NetworkName the default is the first
	// network in ConfDir, in file order.
	ConfDir, NetworkName string
	// ConfList, when set, is the default network's conflist and wins over
	// ConfDir, which is then not read.
	ConfList []byte
	// ConfLists are more networks' conflists, known besides ConfList's or
	// ConfDir's; they win over a ConfDir network of the same name. Without
	// ConfList, ConfDir and NetworkName, the first is the default network.
	ConfLists [][]byte
	// IgnorePortMappingHostIP drops Port.HostIP from the port mappings.
	IgnorePortMappingHostIP bool
	// Retry says how Setup retries; the zero value is DefaultRetryPolicy.
	Retry RetryPolicy
	// IPTables opens iptables (ipv6 false) or ip6tables (ipv6 true) for
	// cleanup. nil: github.com/coreos/go-iptables.
	IPTables func(ipv6 bool) (host.IPTables, error)
	// NFTables opens nftables for cleanup, drift checks and repairs: the
	// plugins' nftables backends are cleaned whatever the conflist names.
	// nil: the host's, read and changed over netlink (rules deleted by
	// handle, listings decoded in-process; `nft -j` only where netlink
	// cannot list a table), repairs written as `nft -f` scripts; a host
	// without nft has no nftables rules, which is no error.
	NFTables func() (host.NFTables, error)
	// CNI drives the plugins. nil: go-cni built from PluginDirs and
	// InterfacePrefix. Tests inject fakes here.
	CNI cni.CNI
	// Watch reloads the conflist when ConfDir changes (ConfDir only).
	Watch bool
	// Links reaches the network devices of the host's namespace, where
	// the bandwidth plugin leaves an ifb device per attachment. nil: the
	// host's, over rtnetlink. Tests replace it.
	Links func() (host.Links, error)
	// CacheDir is libcni's cache directory, where results are cached per
	// attachment; GC, Teardown's cleanup and Status read it. "":
	// /var/lib/cni. go-cni always caches in /var/lib/cni, so another value
	// needs Config.CNI (a fake, or a CNI that caches there too).
	CacheDir string
	// StateDir is the host registry: one record per attachment, whose it
	// is and what its cleanup needs, and the locks every process on the
	// host honours. Every process that attaches workloads on the host
	// (orchestrators, cninet daemon, the CLI) must use the same one,
	// whatever its CacheDir: an absolute path (a relative one is
	// ErrInvalidConfig). "": /var/lib/cninet. Tests: a temp dir.
	StateDir string
	// Owner names whose attachments this Configurator makes: its GC
	// collects only its own owner's dead attachments (and state no record
	// claims once its namespace is gone), never another owner's live
	// ones; a DEL of one attachment (Disconnect with
	// ConnectOptions.IfName) of another owner's live attachment changes
	// nothing. "": the executable's base name.
	Owner string
	// TracerProvider receives a span per Setup, Teardown, Check, Status,
	// GC and Reload, with children per network, ADD attempt, DEL and
	// force cleanup (README, "Observability"). nil: the global provider
	// (otel.GetTracerProvider), which records nothing unless the program
	// installs one. go-cni's own spans (cni.Setup, cni.Remove, …) nest
	// under cninet's, but go-cni always uses the global provider: they
	// appear only when the global provider is set.
	TracerProvider trace.TracerProvider
	// RepairEvery, when positive, starts a watcher that keeps every live
	// attachment of Owner whole by itself: it checks them all at that
	// interval, and at once when the nf_tables ruleset changes (a
	// firewall reload, an `iptables -F`, `nft flush ruleset`), and
	// repairs what is missing as Check with CheckOptions.Repair does,
	// each attachment under its lock. Where every firewall change
	// arrives as an nf_tables change (iptables-nft, nft), the periodic
	// check reads the firewall only when one arrived since; files and
	// namespaces it reads every time. A drift that keeps coming back is
	// reported rather than fought. Close stops it. 0: no watcher (the
	// default). See docs/drift.md.
	RepairEvery time.Duration
	// RepairAnyOwner makes the watcher keep other owners' attachments
	// on this Configurator's networks whole too: cninet daemon, which
	// serves every CNI runtime as an owner of its own, sets it.
	RepairAnyOwner bool
	// MeterProvider receives cninet's metrics (cninet.operations,
	// cninet.cleanup.removed, …; README, "Observability"). nil: the
	// global provider (otel.GetMeterProvider).
	MeterProvider metric.MeterProvider
}

const (
	defaultPluginDir = "/opt/cni/bin"
	// defaultCacheDir is where libcni, and so go-cni, caches results.
	defaultCacheDir = "/var/lib/cni"
)

// applyDefaults is cfg with the documented default of every field left
// empty that has one New applies.
func applyDefaults(cfg Config) Config {
	if cfg.Links == nil {
		cfg.Links = links.New
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.PluginDirs == nil {
		if env := os.Getenv("CNI_PATH"); env != "" {
			cfg.PluginDirs = filepath.SplitList(env)
		} else {
			cfg.PluginDirs = []string{defaultPluginDir}
		}
	}
	if cfg.InterfacePrefix == "" {
		cfg.InterfacePrefix = cni.DefaultPrefix
	}
	if cfg.CacheDir == "" {
		cfg.CacheDir = defaultCacheDir
	}
	if cfg.StateDir == "" {
		cfg.StateDir = defaultStateDir
	}
	if cfg.Owner == "" {
		cfg.Owner = defaultOwner()
	}
	return cfg
}

// PluginAdder is what an injected Config.CNI may also offer: the ADD of
// one plugin of the network's chain alone, for an attachment made
// before, with its result as prevResult. Check's repair
// (CheckOptions.Repair) restores a plugin's missing rules with it.
// go-cni cannot (cninet then runs the plugin from PluginDirs itself);
// cninettest's fake CNI can. Without it, a repair that needs a plugin's
// ADD fails and says so.
type PluginAdder interface {
	AddPlugin(ctx context.Context, id, netns, pluginType string, prevResult types.Result, opts ...cni.NamespaceOpts) error
}

// defaultStateDir is the registry every process on a host shares.
const defaultStateDir = registry.DefaultDir

// defaultOwner names a Configurator's attachments when Config.Owner is
// empty: the executable's base name.
func defaultOwner() string {
	exe, err := os.Executable()
	if err != nil || filepath.Base(exe) == "" {
		return "cninet"
	}
	return filepath.Base(exe)
}

// IPTables is the seam through which cleanup reads and deletes iptables
// rules (Config.IPTables opens one per IP family). go-iptables'
// *iptables.IPTables satisfies it unchanged; package host documents it
// and the optional extensions a faster implementation may add.
type IPTables = host.IPTables
