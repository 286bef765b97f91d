// Package catalog is the network catalog of a cninet Configurator: every
// network it knows (its conflists, read from Config and on Reload, and
// those a Reload dropped), the plugin binaries those networks run and the
// firewall backend each really uses on this host, the capabilities a
// network declares, and the conflist files themselves (finding, parsing,
// validating, generating and writing them).
//
// It is given what it needs as values (the Config fields that name the
// networks, the plugin directories, a logger, go-cni and the firewall
// seams' openers), never the Configurator; it knows nothing of
// allocations, operations or the host's footprint beyond a network's
// footprint.Network. Its errors wrap cninet's sentinels (package errs),
// so that errors.Is(err, cninet.ErrInvalidConfig) holds.
//
// Vocabulary: a network's conf is its conflist as loaded (Conf); Info is
// what the operations need to know about it; the default network is the
// one an allocation that names none joins; retired networks are those a
// Reload dropped, which Teardown still detaches.
//
// Files:
//
//	doc.go           This overview.
//	conf.go          Conf, Info, NewConf, Parse: one parsed conflist; NameRule and CheckName for network names.
//	confdir.go       FindConfList: a network's conflist in a directory; reading .conf, .conflist and .json files, skipping broken ones.
//	networks.go      Networks: every known network, read from Sources and on Reload, the default handed to go-cni, retired ones kept.
//	view.go          View: the known networks at one instant, as one operation resolves its networks.
//	plugins.go       Plugins: the plugin binaries found before Setup, and the CNI spec versions each supports.
//	nftrelease.go    Whether a plugin binary can provide the nftables backend a conflist asks for (CheckBackends).
//	backends.go      BackendIPTables, BackendNFTables: the firewall backend each plugin really uses on this host (HostportNFT, NeedsIPTables, Recorded).
//	capabilities.go  ValidateCapabilities, CapabilityPortMappings, Info.Declared: the capability arguments a network is given.
//	bridge.go        Bridge, DefaultBridge, BridgeConfList: the generated default bridge conflist.
//	write.go         WriteConfList: a conflist written atomically.
package catalog
