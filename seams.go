package cninet

import (
	"context"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/iptables"
	"github.com/seed1280861d/cninet/internal/nftables"
)

// cleanerSeams is how a cleanup reaches the host (footprint.Seams), and
// what it must know about each network whose state may be there.
type cleanerSeams struct {
	iptOpener *iptables.Opener
	nftOpener *nftables.Opener
	openLinks func() (host.Links, error)
	cacheDir  string
	ifs       ifNaming
	nets      *catalog.Networks
	plugins   *catalog.Plugins
	records   footprint.RecordedHolders // the host registry
}

// network is what the cleaner must know about conf's network: its
// attachments have interface ifName, or any of ifNames.
func (s *cleanerSeams) network(conf catalog.Conf, ifName string, ifNames []string) footprint.Network {
	n := conf.Info.Footprint
	n.IfName, n.IfNames, n.CacheDir = ifName, ifNames, s.cacheDir
	n.HostportNFT = s.plugins.HostportNFT(conf)
	n.NoIPTables = !s.plugins.NeedsIPTables(conf)
	return n
}

// all is how the cleaner reaches the seams, with every network whose
// state may be there, those a Reload dropped included: another network's
// reservations and cached results say that an address is held.
func (s *cleanerSeams) all() footprint.Seams {
	known := s.nets.All(true)
	ifNames := s.ifs.all(len(known))
	nets := make([]footprint.Network, len(known))
	for i, conf := range known {
		nets[i] = s.network(conf, ifNames[0], ifNames)
	}
	return footprint.Seams{IPTables: s.iptOpener.Get, NFTables: s.nftOpener.Get, Links: s.openLinks, Networks: nets, Records: s.records}
}

// cleaner is a cleaner of the footprint of n's attachments (n as a
// detach's footprint.Leaving has it), its proofs kept in proofs (nil:
// none).
func (s *cleanerSeams) cleaner(ctx context.Context, n footprint.Network, proofs footprint.ProofStore) *footprint.Cleaner {
	seams := s.all()
	if proofs != nil {
		seams.Proofs = proofs
	}
	return footprint.NewCleaner(ctx, n, seams)
}

// IPTables is the seam through which cleanup reads and deletes iptables
// rules (Config.IPTables opens one per IP family). go-iptables'
// *iptables.IPTables satisfies it unchanged; package host documents it
// and the optional extensions a faster implementation may add.
type IPTables = host.IPTables
