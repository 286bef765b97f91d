package cninet

import (
	"context"
	"errors"

	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/telemetry"
)

// newTelemetry builds a Configurator's telemetry (internal/telemetry) from the
// providers in cfg, with what it asks of cninet: the error.type of an
// error, the number of known networks. It never fails New: instruments
// the provider refuses are only warned about.
func newTelemetry(cfg Config, logger hclog.Logger, nets *catalog.Networks) *telemetry.Recorder {
	t, err := telemetry.New(telemetry.Options{TracerProvider: cfg.TracerProvider, MeterProvider: cfg.MeterProvider,
		ErrorType: errorType, Networks: func() int { return len(nets.All(false)) }})
	if err != nil {
		logger.Warn("OpenTelemetry instruments unavailable; those metrics are not recorded", "error", err)
	}
	return t
}

// errorType is err's error.type: the name of the first sentinel it wraps,
// the context's error, or "_OTHER"; "" for nil.
func errorType(err error) string {
	if err == nil {
		return ""
	}
	for _, s := range errorTypes {
		if errors.Is(err, s.err) {
			return s.name
		}
	}
	return "_OTHER"
}

// errorTypes are checked in order: the most specific first.
var errorTypes = []struct {
	err  error
	name string
}{
	{context.DeadlineExceeded, "timeout"},
	{context.Canceled, "canceled"},
	{ErrInvalidAllocation, "invalid_allocation"},
	{ErrInvalidArgument, "invalid_argument"},
	{ErrNetworkNotFound, "network_not_found"},
	{ErrPluginMissing, "plugin_missing"},
	{ErrInvalidConfig, "invalid_config"},
	{ErrNoAddress, "no_address"},
	{ErrCheckFailed, "check_failed"},
	{ErrCheckUnsupported, "check_unsupported"},
	{ErrIPTablesMissing, "iptables_missing"},
	{ErrCleanupFailed, "cleanup_failed"},
	{ErrSetupFailed, "setup_failed"},
	{ErrNotReady, "not_ready"},
	{ErrClosed, "closed"},
	{ErrIO, "io"},
}
