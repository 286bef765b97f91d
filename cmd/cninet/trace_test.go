package main

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/internal/netsandbox"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

func TestTraceIsPrintedAsATreeWithDurations(t *testing.T) {
	tree := startTrace()
	tr := tree.Tracer("test")
	ctx, setup := tr.Start(context.Background(), "cninet.Setup", trace.WithAttributes(attribute.String("cni.id", "a1")))
	actx, attach := tr.Start(ctx, "cninet.attach", trace.WithAttributes(attribute.String("cni.id", "a1"), attribute.String("cni.name", "nomad")))
	_, add := tr.Start(actx, "cninet.add")
	add.RecordError(errors.New("bridge busy"))
	add.SetStatus(codes.Error, "bridge busy")
	add.End()
	_, add2 := tr.Start(actx, "cninet.add")
	add2.SetAttributes(attribute.StringSlice("cninet.removed_by", []string{"iptables rule: 2", "files reservation: 1"}))
	add2.End()
	attach.End()
	setup.End()
	tr.Start(context.Background(), "cninet.GC") // never ended
	var out bytes.Buffer
	tree.print(&out)

	d := `[0-9.]+(µs|ms|s)`
	want := []string{
		`^trace:$`,
		`^  cninet.Setup  ` + d + `  cni.id=a1$`,
		`^  └─ cninet.attach  ` + d + `  cni.name=nomad$`, // cni.id is its parent's: not repeated
		`^     ├─ cninet.add  ` + d + `  ERROR: bridge busy$`,
		`^     │     · error: bridge busy$`,
		`^     └─ cninet.add  ` + d + `  cninet.removed_by="iptables rule: 2, files reservation: 1"$`,
		`^  cninet.GC  \(not ended\)$`,
	}
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(lines) != len(want) {
		t.Fatalf("%d lines, want %d:\n%s", len(lines), len(want), out.String())
	}
	for i, re := range want {
		if !regexp.MustCompile(re).MatchString(lines[i]) {
			t.Errorf("line %d %q does not match %s", i, lines[i], re)
		}
	}
	if _, span := tr.Start(context.Background(), "after"); span.IsRecording() {
		t.Error("spans started after the tree was printed still record")
	}
}

func TestCommandsWithTracePrintWhatCninetDid(t *testing.T) {
	dir := confDirOf(t, "clia", "clib")
	noPlugins, absent := t.TempDir(), filepath.Join(t.TempDir(), "absent-netns")
	cases := []struct {
		name    string
		args    []string
		sandbox bool // the command reaches for libcni's cache and locks
		want    []string
	}{
		{"status", []string{"status", "--trace", "--cni-path", noPlugins}, false,
			[]string{"\n  cninet.Status  ", "\n  └─ cninet.status  ", "cni.name=nomad", "ERROR: cni plugin missing"}},
		{"connect", []string{"connect", "--trace", "--cni-path", noPlugins, "--conf-dir", dir, "--network", "clib", "--id", "tr-1", "--netns", absent}, true,
			[]string{"\n  cninet.Connect  ", "cni.id=tr-1", "ERROR: "}},
		{"disconnect", []string{"disconnect", "--trace", "--cni-path", noPlugins, "--conf-dir", dir, "--network", "clib", "--id", "tr-1", "--netns", absent}, true,
			[]string{"\n  cninet.Disconnect  ", "cni.id=tr-1"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if tc.sandbox {
				netsandbox.Require(t)
			}
			_, _, stderr := runCLI(tc.args...)
			for _, want := range append([]string{"trace:\n"}, tc.want...) {
				if !strings.Contains(stderr, want) {
					t.Errorf("stderr lacks %q:\n%s", want, stderr)
				}
			}
		})
	}
}
