package telemetry

// Operation is what a span and the operation metrics are about: one call
// of cninet's API, or one network's part of it.
type Operation int

// The operations, each with its cninet.operation attribute (String) and
// its span's name.
const (
	OpSetup Operation = iota
	OpTeardown
	OpCheck
	OpStatus
	OpGC
	OpReload
	OpConnect
	OpDisconnect
	// Per network, inside one of the above.
	OpAttach
	OpDetach
	OpCheckNetwork
	OpStatusNetwork
)

var operations = [...]struct{ name, span string }{
	OpSetup:         {"setup", "cninet.Setup"},
	OpTeardown:      {"teardown", "cninet.Teardown"},
	OpCheck:         {"check", "cninet.Check"},
	OpStatus:        {"status", "cninet.Status"},
	OpGC:            {"gc", "cninet.GC"},
	OpReload:        {"reload", "cninet.Reload"},
	OpConnect:       {"connect", "cninet.Connect"},
	OpDisconnect:    {"disconnect", "cninet.Disconnect"},
	OpAttach:        {"attach", "cninet.attach"},
	OpDetach:        {"detach", "cninet.detach"},
	OpCheckNetwork:  {"check", "cninet.check"},
	OpStatusNetwork: {"status", "cninet.status"},
}

// String is o's cninet.operation attribute ("setup", "attach", …).
func (o Operation) String() string { return operations[o].name }
