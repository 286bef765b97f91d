package fakes

import (
	cni "github.com/containerd/go-cni"

	"github.com/seed1280861d/cninet/host"
)

// Every seam and optional extension each fake offers, in one place: a
// fake that stops offering one no longer compiles, where a caller's type
// assertion would silently take the slow way (or skip a check). The
// wrappers (Batching, Saving, Probing, Matching) are their seam too, as
// Config takes them. CNI's cninet.PluginAdder is checked in cninet's
// driver_internal_test.go: this package imports nothing of cninet.
var (
	_ host.IPTables   = (*IPTables)(nil)
	_ host.RuleWriter = (*IPTables)(nil)

	_ host.IPTables    = (*Batching)(nil)
	_ host.TableLister = (*Batching)(nil)
	_ host.Restorer    = (*Batching)(nil)
	_ host.RuleWriter  = (*Batching)(nil)

	_ host.IPTables    = Saving{}
	_ host.TableLister = Saving{}
	_ host.Restorer    = Saving{}
	_ host.Saver       = Saving{}
	_ host.RuleWriter  = Saving{}

	_ host.IPTables         = Probing{}
	_ host.ChainProber      = Probing{}
	_ host.AddrScanner      = Probing{}
	_ host.OtherAddrScanner = Probing{}
	_ host.Saver            = Probing{}
	_ host.TableLister      = Probing{}
	_ host.Restorer         = Probing{}
	_ host.RuleWriter       = Probing{}

	_ host.NFTables         = (*NFTables)(nil)
	_ host.NFTBriefLister   = (*NFTables)(nil)
	_ host.NFTScriptRunner  = (*NFTables)(nil)
	_ host.NFTChangeWatcher = (*NFTables)(nil)

	_ host.NFTables         = Matching{}
	_ host.NFTRuleMatcher   = Matching{}
	_ host.NFTRuleFinder    = Matching{}
	_ host.NFTRuleLookup    = Matching{}
	_ host.NFTBriefLister   = Matching{}
	_ host.NFTScriptRunner  = Matching{}
	_ host.NFTChangeWatcher = Matching{}

	_ host.Links         = (*Links)(nil)
	_ host.LinkInspector = (*Links)(nil)

	_ cni.CNI = (*CNI)(nil)
)
