package thick

import (
	"context"
	"errors"
	"fmt"
	"os"

	cni "github.com/containerd/go-cni"
	"github.com/containernetworking/cni/libcni"
	"github.com/containernetworking/cni/pkg/invoke"
	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/version"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
	"go.opentelemetry.io/otel/metric"
)

// Configurator is what thick mode calls of a cninet.Configurator, listed
// in one place: a request's verb (Connect, Disconnect, Check, GC,
// Status), what it reads to answer (the cached result and interfaces,
// the host registry's records, the known networks), and the delegate
// conf dir's life (Reload, Close). *cninet.Configurator implements it.
type Configurator interface {
	Connect(ctx context.Context, alloc *cninet.Allocation, network, netns string, opts ...cninet.ConnectOptions) (*cninet.NetworkStatus, error)
	Disconnect(ctx context.Context, alloc *cninet.Allocation, network, netns string, opts ...cninet.ConnectOptions) error
	Check(ctx context.Context, alloc *cninet.Allocation, netns string, opts ...cninet.CheckOptions) error
	GC(ctx context.Context, liveAllocIDs []string, opts ...cninet.GCOptions) (*cninet.GCReport, error)
	Status(ctx context.Context, networks ...string) error
	CachedResult(id, network, ifName string) (types.Result, error)
	CachedInterfaces(id, network string) ([]string, error)
	Attachments(ids ...string) ([]cninet.AttachmentRecord, error)
	Networks() []string
	Reload() error
	Close() error
}

var _ Configurator = (*cninet.Configurator)(nil)

// NewConfigurator returns the Configurator thick mode serves requests
// with: every network in info.ConfDir, the plugins in info.CNIPath, and
// libcni's cache in info.CacheDir, apart from the runtime's. Thick mode
// attaches every network through libcni under the runtime's interface
// name, so go-cni (which can only cache in /var/lib/cni) is replaced by
// one that refuses to attach; it still loads the default network and runs
// its CNI STATUS, which cninet asks of go-cni for the default network.
//
// tweaks, when given, change the Config before New sees it (tests inject
// fake iptables and nftables this way).
func NewConfigurator(info Info, logger hclog.Logger, meters metric.MeterProvider, tweaks ...func(*cninet.Config)) (*cninet.Configurator, error) {
	loader, err := cni.New(cni.WithPluginDir(info.CNIPath))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", cninet.ErrInvalidConfig, err)
	}
	status := libcni.NewCNIConfig(info.CNIPath, &invoke.DefaultExec{RawExec: &invoke.RawExec{Stderr: os.Stderr}, PluginDecoder: version.PluginDecoder{}})
	cfg := cninet.Config{
		Logger:        logger,
		ConfDir:       info.ConfDir,
		PluginDirs:    info.CNIPath,
		CacheDir:      info.CacheDir,
		StateDir:      info.StateDir,
		Owner:         Owner,
		CNI:           noGoCNI{CNI: loader, status: status},
		MeterProvider: meters,
	}
	for _, tweak := range tweaks {
		tweak(&cfg)
	}
	return cninet.New(cfg)
}

// errNoGoCNI would only surface if a thick-mode path reached go-cni.
var errNoGoCNI = errors.New("thick mode attaches every network through libcni under the runtime's interface name; go-cni is not used")

// noGoCNI stands in for go-cni: it loads the default network (into the
// embedded go-cni, which caches nothing for that), runs its CNI STATUS
// within StatusTimeout, and never attaches.
type noGoCNI struct {
	cni.CNI
	status *libcni.CNIConfig
}

// StatusTimeout bounds the CNI STATUS of a delegate network that thick
// mode runs for cninet's Status of its default network (go-cni's own has
// no deadline, and a plugin that hangs would hold a probe slot for good).
const StatusTimeout = DefaultProbeTimeout

// Status runs the loaded network's CNI STATUS (for conflists of CNI 1.1
// and later; libcni skips older ones); cni.ErrCNINotInitialized before
// anything is loaded, as go-cni answers.
func (n noGoCNI) Status() error {
	nets := n.CNI.GetConfig().Networks
	if len(nets) == 0 {
		return cni.ErrCNINotInitialized
	}
	ctx, cancel := context.WithTimeout(context.Background(), StatusTimeout)
	defer cancel()
	for _, net := range nets {
		list, err := libcni.ConfListFromBytes([]byte(net.Config.Source))
		if err != nil {
			return fmt.Errorf("%w: network %q: %w", cninet.ErrInvalidConfig, net.Config.Name, err)
		}
		if err := n.status.GetStatusNetworkList(ctx, list); err != nil {
			return err
		}
	}
	return nil
}

func (noGoCNI) Setup(context.Context, string, string, ...cni.NamespaceOpts) (*cni.Result, error) {
	return nil, errNoGoCNI
}

func (noGoCNI) SetupSerially(context.Context, string, string, ...cni.NamespaceOpts) (*cni.Result, error) {
	return nil, errNoGoCNI
}

func (noGoCNI) Remove(context.Context, string, string, ...cni.NamespaceOpts) error { return errNoGoCNI }
func (noGoCNI) Check(context.Context, string, string, ...cni.NamespaceOpts) error  { return errNoGoCNI }
