package attachments

import (
	"context"

	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/catalog"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/iptables"
	"github.com/seed1280861d/cninet/internal/nftables"
)

// Seams is how a cleanup reaches the host (footprint.Seams), and
// what it must know about each network whose state may be there.
type Seams struct {
	IPTOpener *iptables.Opener
	NFTOpener *nftables.Opener
	OpenLinks func() (host.Links, error)
	CacheDir  string
	Ifs       IfNaming
	Nets      *catalog.Networks
	Plugins   *catalog.Plugins
	Records   footprint.RecordedHolders // the host registry
}

// Network is what the cleaner must know about conf's network: its
// attachments have interface ifName, or any of ifNames.
func (s *Seams) Network(conf catalog.Conf, ifName string, ifNames []string) footprint.Network {
	n := conf.Info.Footprint
	n.IfName, n.IfNames, n.CacheDir = ifName, ifNames, s.CacheDir
	n.HostportNFT = s.Plugins.HostportNFT(conf)
	n.NoIPTables = !s.Plugins.NeedsIPTables(conf)
	return n
}

// All is how the cleaner reaches the seams, with every network whose
// state may be there, those a Reload dropped included: another network's
// reservations and cached results say that an address is held.
func (s *Seams) All() footprint.Seams {
	known := s.Nets.All(true)
	ifNames := s.Ifs.All(len(known))
	nets := make([]footprint.Network, len(known))
	for i, conf := range known {
		nets[i] = s.Network(conf, ifNames[0], ifNames)
	}
	return footprint.Seams{IPTables: s.IPTOpener.Get, NFTables: s.NFTOpener.Get, Links: s.OpenLinks, Networks: nets, Records: s.Records}
}

// cleaner is a cleaner of the footprint of n's attachments (n as a
// detach's footprint.Leaving has it), its proofs kept in proofs (nil:
// none).
func (s *Seams) cleaner(ctx context.Context, n footprint.Network, proofs footprint.ProofStore) *footprint.Cleaner {
	seams := s.All()
	if proofs != nil {
		seams.Proofs = proofs
	}
	return footprint.NewCleaner(ctx, n, seams)
}
