// Package telemetry is cninet's OpenTelemetry instrumentation: a span per
// operation, per network, per ADD attempt, DEL, cleanup and repair, and
// the metrics the README's "Observability" section and docs/ list. The
// span names, attribute keys, metric names and units are documented and
// tested through cninet's API: they do not change.
//
// It imports only OpenTelemetry's API packages (the SDK is for tests,
// examples and the daemon) and nothing of cninet but internal/footprint,
// whose removed items, health and live attachments it reports. What it
// needs of the root — the providers, the error.type of a failure, the
// number of known networks — the root hands New as values (Options).
// With no provider installed a Recorder costs next to nothing
// (BenchmarkTelemetryWithoutProvider); a nil *Recorder records nothing.
//
// Files:
//
//	recorder.go    Recorder, Options, New, Close: the tracer and instruments, whether they record now
//	operations.go  Operation: the operations and their spans' names
//	attributes.go  The attribute keys (go-cni's cni.* where the meaning is the same)
//	spans.go       The spans: an operation's, a network's (OpSpan), an ADD attempt's (AttemptSpan), a DEL's or cleanup's (Span); error.type on failures
//	metrics.go     The instruments, their attributes built once per combination, the gauges (NoteReady), cninet.kept (Kept)
//	removed.go     What a cleanup (Cleaned) and GC (GCDone, TraceSweep) removed, grouped by kind and backend
//	repairs.go     What drift checks found (Checked) and repairs restored (StartRepair, Repaired, CountRepair, RepairedAfter)
package telemetry
