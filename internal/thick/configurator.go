package thick

import (
	"context"
	"errors"

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
// one that refuses to run.
//
// tweaks, when given, change the Config before New sees it (tests inject
// fake iptables and nftables this way).
func NewConfigurator(info Info, logger hclog.Logger, meters metric.MeterProvider, tweaks ...func(*cninet.Config)) (*cninet.Configurator, error) {
	cfg := cninet.Config{
		Logger:        logger,
		ConfDir:       info.ConfDir,
		PluginDirs:    info.CNIPath,
		CacheDir:      info.CacheDir,
		StateDir:      info.StateDir,
		Owner:         Owner,
		CNI:           noGoCNI{},
		MeterProvider: meters,
	}
	for _, tweak := range tweaks {
		tweak(&cfg)
	}
	return cninet.New(cfg)
}

// errNoGoCNI would only surface if a thick-mode path reached go-cni.
var errNoGoCNI = errors.New("thick mode attaches every network through libcni under the runtime's interface name; go-cni is not used")

// noGoCNI stands in for go-cni: loaded, ready, and never attaching.
type noGoCNI struct{}

func (noGoCNI) Setup(context.Context, string, string, ...cni.NamespaceOpts) (*cni.Result, error) {
	return nil, errNoGoCNI
}

func (noGoCNI) SetupSerially(context.Context, string, string, ...cni.NamespaceOpts) (*cni.Result, error) {
	return nil, errNoGoCNI
}

func (noGoCNI) Remove(context.Context, string, string, ...cni.NamespaceOpts) error { return errNoGoCNI }
func (noGoCNI) Check(context.Context, string, string, ...cni.NamespaceOpts) error  { return errNoGoCNI }
func (noGoCNI) Load(...cni.Opt) error                                              { return nil }
func (noGoCNI) Status() error                                                      { return nil }
func (noGoCNI) GetConfig() *cni.ConfigResult                                       { return &cni.ConfigResult{} }
