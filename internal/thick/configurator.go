package thick

import (
	"context"
	"errors"
	"fmt"

	cni "github.com/containerd/go-cni"
	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet"
	"go.opentelemetry.io/otel/metric"
)

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
	cfg := cninet.Config{
		Logger:        logger,
		ConfDir:       info.ConfDir,
		PluginDirs:    info.CNIPath,
		CacheDir:      info.CacheDir,
		StateDir:      info.StateDir,
		Owner:         Owner,
		CNI:           noGoCNI{loader},
		MeterProvider: meters,
	}
	for _, tweak := range tweaks {
		tweak(&cfg)
	}
	return cninet.New(cfg)
}

// errNoGoCNI would only surface if a thick-mode path reached go-cni.
var errNoGoCNI = errors.New("thick mode attaches every network through libcni under the runtime's interface name; go-cni is not used")

// noGoCNI stands in for go-cni: it loads the default network and runs
// its STATUS (through the embedded go-cni, which caches nothing for
// those), and never attaches.
type noGoCNI struct{ cni.CNI }

func (noGoCNI) Setup(context.Context, string, string, ...cni.NamespaceOpts) (*cni.Result, error) {
	return nil, errNoGoCNI
}

func (noGoCNI) SetupSerially(context.Context, string, string, ...cni.NamespaceOpts) (*cni.Result, error) {
	return nil, errNoGoCNI
}

func (noGoCNI) Remove(context.Context, string, string, ...cni.NamespaceOpts) error { return errNoGoCNI }
func (noGoCNI) Check(context.Context, string, string, ...cni.NamespaceOpts) error  { return errNoGoCNI }
