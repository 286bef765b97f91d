package repairwatch

import (
	"context"
	"time"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/identity"
	"github.com/seed1280861d/cninet/internal/registry"
)

// Parts is what the watcher uses of the Configurator that starts it: the
// host registry, the host's firewall, and telemetry.
type Parts interface {
	Registry
	Firewall
	Telemetry
}

// Registry is how the watcher finds the attachments it keeps whole and
// takes their locks.
type Registry interface {
	// Records lists every record of the host registry; an error says a
	// directory could not be read (the records that could are listed).
	Records() ([]registry.Record, error)
	// Recorded is key's record now, nil when there is none.
	Recorded(key identity.Key) *registry.Record
	// Knows reports whether network is one of the Configurator's (one a
	// Reload dropped included).
	Knows(network string) bool
	// Attachment is the live attachment rec records; false when it
	// cannot be built (its conflist cannot be read).
	Attachment(rec *registry.Record) (Attachment, bool)
	// TryEnter takes id's lock unless another operation (of this
	// process or another) holds it: then busy, and nothing is taken.
	TryEnter(id string) (leave func(), busy bool)
}

// Firewall is how the watcher reads the host.
type Firewall interface {
	// NFTables opens nftables, whose change notifications wake the
	// watcher (host.NFTChangeWatcher); host.ErrNFTablesMissing: the host
	// has none.
	NFTables() (host.NFTables, error)
	// IPTablesOnNFTables reports whether iptables' and ip6tables' tables
	// are nf_tables' (host.NFTablesBacked): then every change to them
	// arrives as a notification.
	IPTablesOnNFTables() bool
	// NewChecker starts a check of live attachments (a
	// *footprint.Checker), reading what r says; ctx bounds its reads.
	NewChecker(ctx context.Context, r Read) Checker
}

// Read says what of the host a check reads (footprint.Checker's fields).
type Read struct {
	// Shallow leaves the devices out but for the namespace's existence.
	Shallow bool
	// FirewallUnchanged leaves the firewall out: it is as the last read
	// found it, whole.
	FirewallUnchanged bool
}

// Checker is one read of the host: what each live attachment lacks, and
// the repair of one from what that read found (*footprint.Checker).
type Checker interface {
	Check(lives []*footprint.Live) []footprint.Health
	Repair(h footprint.Health, r footprint.Restorers) ([]footprint.Missing, error)
	// RestoreRules writes the iptables rules and chains hs lack, of
	// every attachment it can, in one iptables-restore per family and
	// table (footprint.PlanRules), and returns which of hs it wrote for.
	RestoreRules(hs []footprint.Health) ([]int, error)
}

// Telemetry is what the watcher counts besides its log lines (cninet's
// metrics cninet.repairs and cninet.repair.latency).
type Telemetry interface {
	// Refused counts an attachment the watcher found drifting and does
	// not repair: it cannot be repaired in place (notInPlace), or its
	// drift keeps coming back.
	Refused(ctx context.Context, network string, notInPlace bool)
	// RepairedAfter records how long after a firewall change an
	// attachment was whole again.
	RepairedAfter(ctx context.Context, network string, d time.Duration)
}

// Attachment is a live attachment the watcher keeps whole: its record,
// what a check compares the host with, and its repair.
type Attachment struct {
	Record *registry.Record
	Live   *footprint.Live
	// Repair restores what h, found by checker's read, says is missing,
	// and reports what it restored and why not the rest.
	Repair func(ctx context.Context, checker Checker, h footprint.Health) ([]footprint.Missing, error)
}

// livesOf is the live attachments of atts.
func livesOf(atts []Attachment) []*footprint.Live {
	out := make([]*footprint.Live, len(atts))
	for i, a := range atts {
		out[i] = a.Live
	}
	return out
}
