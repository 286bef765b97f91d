package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/embedded"
)

// spanTree is the TracerProvider behind --trace: it keeps every span of
// the command in memory and prints them as an indented tree with their
// durations, attributes, events and errors. It is built on the
// OpenTelemetry API alone; the command needs no exporter.
type spanTree struct {
	embedded.TracerProvider

	mu      sync.Mutex
	spans   []*treeSpan
	stopped bool
}

// startTrace records the spans of this command: it is cninet's
// TracerProvider and, for go-cni's spans, the global one too.
func startTrace() *spanTree {
	t := &spanTree{}
	otel.SetTracerProvider(t)
	return t
}

// provider is t as cninet.Config.TracerProvider: nil (the global
// provider) without --trace.
func (t *spanTree) provider() trace.TracerProvider {
	if t == nil {
		return nil
	}
	return t
}

// Tracer implements trace.TracerProvider.
func (t *spanTree) Tracer(string, ...trace.TracerOption) trace.Tracer { return treeTracer{tree: t} }

type treeTracer struct {
	embedded.Tracer
	tree *spanTree
}

// Start implements trace.Tracer: the new span is a child of ctx's.
func (tr treeTracer) Start(ctx context.Context, name string, opts ...trace.SpanStartOption) (context.Context, trace.Span) {
	cfg := trace.NewSpanStartConfig(opts...)
	parent := trace.SpanContextFromContext(ctx)
	if cfg.NewRoot() {
		parent = trace.SpanContext{}
	}
	traceID := parent.TraceID()
	if !parent.IsValid() {
		_, _ = rand.Read(traceID[:])
	}
	s := &treeSpan{tree: tr.tree, name: name, start: time.Now(), parent: parent.SpanID(), attrs: cfg.Attributes()}
	var spanID trace.SpanID
	_, _ = rand.Read(spanID[:])
	s.sc = trace.NewSpanContext(trace.SpanContextConfig{TraceID: traceID, SpanID: spanID, TraceFlags: trace.FlagsSampled})
	tr.tree.mu.Lock()
	defer tr.tree.mu.Unlock()
	if tr.tree.stopped {
		return ctx, trace.SpanFromContext(context.Background()) // after the tree was printed: a no-op span
	}
	tr.tree.spans = append(tr.tree.spans, s)
	return trace.ContextWithSpan(ctx, s), s
}

// treeSpan is one recorded span.
type treeSpan struct {
	embedded.Span
	tree   *spanTree
	sc     trace.SpanContext
	parent trace.SpanID
	start  time.Time

	mu     sync.Mutex
	name   string
	end    time.Time
	attrs  []attribute.KeyValue
	events []string
	status codes.Code
	desc   string
}

func (s *treeSpan) End(...trace.SpanEndOption) {
	s.mu.Lock()
	if s.end.IsZero() {
		s.end = time.Now()
	}
	s.mu.Unlock()
}

func (s *treeSpan) AddEvent(name string, opts ...trace.EventOption) {
	cfg := trace.NewEventConfig(opts...)
	s.mu.Lock()
	s.events = append(s.events, strings.TrimSpace(name+" "+formatAttrs(cfg.Attributes())))
	s.mu.Unlock()
}

func (s *treeSpan) AddLink(trace.Link) {}

func (s *treeSpan) IsRecording() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.end.IsZero()
}

func (s *treeSpan) RecordError(err error, _ ...trace.EventOption) {
	if err != nil {
		s.AddEvent("error: " + err.Error())
	}
}

func (s *treeSpan) SpanContext() trace.SpanContext { return s.sc }

func (s *treeSpan) SetStatus(code codes.Code, desc string) {
	s.mu.Lock()
	s.status, s.desc = code, desc
	s.mu.Unlock()
}

func (s *treeSpan) SetName(name string) {
	s.mu.Lock()
	s.name = name
	s.mu.Unlock()
}

func (s *treeSpan) SetAttributes(kv ...attribute.KeyValue) {
	s.mu.Lock()
	s.attrs = append(s.attrs, kv...)
	s.mu.Unlock()
}

func (s *treeSpan) TracerProvider() trace.TracerProvider { return s.tree }

// print stops recording and writes the tree to w, each span as
//
//	name  duration  key=value …
//
// its children indented below it in the order they started.
func (t *spanTree) print(w io.Writer) {
	t.mu.Lock()
	t.stopped = true
	spans := append([]*treeSpan(nil), t.spans...)
	t.mu.Unlock()
	known := map[trace.SpanID]bool{}
	children := map[trace.SpanID][]*treeSpan{}
	for _, s := range spans {
		known[s.sc.SpanID()] = true
	}
	var roots []*treeSpan
	for _, s := range spans {
		if known[s.parent] {
			children[s.parent] = append(children[s.parent], s)
		} else {
			roots = append(roots, s)
		}
	}
	fmt.Fprintln(w, "trace:")
	for _, s := range sortByStart(roots) {
		printSpan(w, s, children, nil, "  ", "  ")
	}
}

// printSpan prints s and its children. An attribute an ancestor already
// showed with the same value (the allocation id, the namespace path) is
// not repeated.
func printSpan(w io.Writer, s *treeSpan, children map[trace.SpanID][]*treeSpan, shown map[attribute.Key]string, first, rest string) {
	s.mu.Lock()
	took := "(not ended)"
	if !s.end.IsZero() {
		took = formatDuration(s.end.Sub(s.start))
	}
	line := fmt.Sprintf("%s%s  %s", first, s.name, took)
	inherited := make(map[attribute.Key]string, len(shown)+len(s.attrs))
	for k, v := range shown {
		inherited[k] = v
	}
	var own []attribute.KeyValue
	for _, kv := range s.attrs {
		if v, ok := shown[kv.Key]; !ok || v != kv.Value.Emit() {
			own = append(own, kv)
		}
		inherited[kv.Key] = kv.Value.Emit()
	}
	if attrs := formatAttrs(own); attrs != "" {
		line += "  " + attrs
	}
	if s.status == codes.Error {
		line += "  ERROR: " + s.desc
	}
	events := append([]string(nil), s.events...)
	s.mu.Unlock()
	fmt.Fprintln(w, line)
	kids := sortByStart(children[s.sc.SpanID()])
	bar := "│  "
	if len(kids) == 0 {
		bar = "   "
	}
	for _, e := range events {
		fmt.Fprintf(w, "%s%s· %s\n", rest, bar, e)
	}
	for i, k := range kids {
		branch, indent := "├─ ", "│  "
		if i == len(kids)-1 {
			branch, indent = "└─ ", "   "
		}
		printSpan(w, k, children, inherited, rest+branch, rest+indent)
	}
}

func sortByStart(spans []*treeSpan) []*treeSpan {
	sort.SliceStable(spans, func(i, j int) bool { return spans[i].start.Before(spans[j].start) })
	return spans
}

// formatDuration rounds d for a person: 3 significant places or so.
func formatDuration(d time.Duration) string {
	switch {
	case d >= time.Second:
		return d.Round(time.Millisecond).String()
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond).String()
	}
	return d.Round(time.Microsecond).String()
}

// formatAttrs writes attributes as key=value, values with spaces in
// quotes (not escaped: this is for reading), lists joined by commas; a key
// set twice shows its last value once.
func formatAttrs(kvs []attribute.KeyValue) string {
	last := map[attribute.Key]int{}
	for i, kv := range kvs {
		last[kv.Key] = i
	}
	var parts []string
	for i, kv := range kvs {
		if last[kv.Key] != i {
			continue
		}
		v := kv.Value.Emit()
		if kv.Value.Type() == attribute.STRINGSLICE {
			v = strings.Join(kv.Value.AsStringSlice(), ", ")
		}
		if v == "" || strings.ContainsAny(v, " \t") {
			v = `"` + v + `"`
		}
		parts = append(parts, string(kv.Key)+"="+v)
	}
	return strings.Join(parts, " ")
}
