// Command bench measures cninet side by side with the alternatives, with
// the real CNI plugins, inside throwaway network namespaces, and writes
// BENCHMARKS.md and an SVG plot. Run it with `make bench` (as root).
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/seed1280861d/cninet/internal/netsandbox"
)

type options struct {
	pluginDir   string
	failonceDir string
	overheadN   int
	recoveryN   int
	concRounds  int
	gcN         int
	out, svg    string
	goBench     string // output of go test -bench, read from a file
}

func main() {
	var o options
	flag.StringVar(&o.pluginDir, "plugins", "/usr/lib/cni", "CNI plugin directory")
	flag.StringVar(&o.failonceDir, "failonce", "", "directory holding the failonce test plugin")
	flag.IntVar(&o.overheadN, "overhead-n", 40, "Setup+Teardown cycles per contender")
	flag.IntVar(&o.recoveryN, "recovery-n", 8, "workloads per contender in the recovery scenario")
	flag.IntVar(&o.concRounds, "conc-rounds", 3, "rounds per concurrency level")
	flag.IntVar(&o.gcN, "gc-n", 1000, "leaked attachments in the GC scenario")
	flag.StringVar(&o.out, "out", "BENCHMARKS.md", "report to write")
	flag.StringVar(&o.svg, "svg", "bench/results.svg", "plot to write")
	flag.StringVar(&o.goBench, "gobench", "", "file with `go test -bench -benchmem` output to include")
	flag.Parse()
	code, err := netsandbox.Run(func() int {
		if err := run(o); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		return 0
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: entering a throwaway network namespace:", err)
		os.Exit(1)
	}
	os.Exit(code)
}

func run(o options) error {
	r := &report{started: time.Now(), opts: o}
	steps := []struct {
		name string
		fn   func(*report) error
	}{
		{"overhead", overhead},
		{"recovery", recovery},
		{"concurrency", concurrency},
		{"cold start", coldStart},
		{"gc", gcScenario},
	}
	for _, s := range steps {
		fmt.Fprintf(os.Stderr, "bench: %s...\n", s.name)
		if err := s.fn(r); err != nil {
			return fmt.Errorf("%s: %w", s.name, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(o.svg), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(o.svg, []byte(r.plot()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(o.out, []byte(r.markdown()), 0o644)
}
