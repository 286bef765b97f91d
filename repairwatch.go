package cninet

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/attachments"
	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/drift"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/identity"
	"github.com/seed1280861d/cninet/internal/registry"
	"github.com/seed1280861d/cninet/internal/repairwatch"
	"github.com/seed1280861d/cninet/internal/telemetry"
)

// The repair watcher (Config.RepairEvery) keeps the owner's live
// attachments whole by itself (internal/repairwatch): a pass at start,
// every RepairEvery and at once when the nf_tables ruleset changes, each
// drifting attachment repaired under its lock, never fighting another
// program. watchedParts is what it reaches of a Configurator.

// watchedParts is the parts of a Configurator the repair watcher uses
// (repairwatch.Parts).
type watchedParts struct {
	registry *attachments.Registry
	// records keeps what the last pass decoded of the registry: a quiet
	// host's records are not decoded again every pass.
	records *registry.RecordCache
	nets    *catalog.Networks
	seams   *attachments.Seams
	tel     *telemetry.Recorder
	// checkedOf builds a live attachment from its record, and repair
	// runs one repair of it through its plugins: the Configurator's.
	checkedOf func(*registry.Record) (drift.Checked, bool)
	repair    func(context.Context, repairwatch.Checker, drift.Checked, footprint.Health) ([]footprint.Missing, error)
}

var _ repairwatch.Parts = watchedParts{}

// newRepairWatcher is owner's repair watcher, as cfg says, not started:
// it checks and repairs with ck's parts.
func newRepairWatcher(cfg Config, owner string, logger hclog.Logger, ck *checker) *repairwatch.Watcher {
	return repairwatch.New(repairwatch.Config{Every: cfg.RepairEvery, Owner: owner, AnyOwner: cfg.RepairAnyOwner, Logger: logger},
		watchedParts{registry: ck.registry, records: &registry.RecordCache{}, nets: ck.nets, seams: ck.seams, tel: ck.tel, checkedOf: ck.lives.CheckedOfRecord,
			repair: ck.repairer.RepairOne})
}

func (p watchedParts) Records() ([]registry.Record, error) {
	all, err := p.registry.Store.AllCached(p.records)
	return all.Records, err
}

func (p watchedParts) Recorded(key identity.Key) *registry.Record {
	return p.registry.Recorded(key.ID, key.Network, key.IfName)
}

func (p watchedParts) Knows(network string) bool {
	_, err := p.nets.Known(network, true)
	return err == nil
}

func (p watchedParts) Attachment(rec *registry.Record) (repairwatch.Attachment, bool) {
	ca, ok := p.checkedOf(rec)
	if !ok {
		return repairwatch.Attachment{}, false
	}
	return repairwatch.Attachment{Record: ca.Rec, Live: ca.Live,
		Repair: func(ctx context.Context, checker repairwatch.Checker, h footprint.Health) ([]footprint.Missing, error) {
			return p.repair(ctx, checker, ca, h)
		}}, true
}

func (p watchedParts) TryEnter(id string) (leave func(), busy bool) { return p.registry.TryEnter(id) }

func (p watchedParts) NFTables() (host.NFTables, error) { return p.seams.NFTOpener.Get() }

func (p watchedParts) IPTablesOnNFTables() bool {
	for _, v6 := range []bool{false, true} {
		ipt, err := p.seams.IPTOpener.Get(v6)
		if err != nil {
			return false
		}
		if b, ok := ipt.(host.NFTablesBacked); !ok || !b.OnNFTables() {
			return false
		}
	}
	return true
}

func (p watchedParts) NewChecker(ctx context.Context, r repairwatch.Read) repairwatch.Checker {
	checker := footprint.NewChecker(ctx, p.seams.All())
	checker.Shallow, checker.FirewallUnchanged = r.Shallow, r.FirewallUnchanged
	return checker
}

func (p watchedParts) Refused(ctx context.Context, network string, notInPlace bool) {
	outcome := telemetry.OutcomeRefused
	if notInPlace {
		outcome = telemetry.OutcomeNotInPlace
	}
	p.tel.CountRepair(ctx, network, outcome)
}

func (p watchedParts) RepairedAfter(ctx context.Context, network string, d time.Duration) {
	p.tel.RepairedAfter(ctx, network, d)
}
