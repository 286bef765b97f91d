package cririg

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// runcEnv names the real runc the caller's binary runs as containerd's
// runc wrapper (RunRuncWrapperIfAsked); refuseEnv names a file whose
// existence makes the wrapper fail every container create.
const (
	runcEnv   = "CNINET_CRIRIG_RUNC"
	refuseEnv = "CNINET_CRIRIG_RUNC_REFUSE"
)

// WriteRuncWrapper writes, at path, the script containerd runs as its
// runc (Config.RuncBinary): it runs self — the caller's own binary, whose
// main calls RunRuncWrapperIfAsked first — as a wrapper around runc. While
// the file refuseMarker exists, the wrapper fails every container create
// ("" never refuses).
func WriteRuncWrapper(path, self, runc, refuseMarker string) error {
	script := fmt.Sprintf("#!/bin/sh\n%s='%s' %s='%s' exec '%s' \"$@\"\n", runcEnv, runc, refuseEnv, refuseMarker, self)
	return os.WriteFile(path, []byte(script), 0o755)
}

// RunRuncWrapperIfAsked makes a binary that WriteRuncWrapper's script
// runs in place of runc a runc that drops from the bundle's config.json
// what the caller's namespaces cannot grant — cgroup limits (no
// controller is delegated to them) and a lowered oom_score_adj
// (containerd asks -998 for a pod sandbox) — and then runs the real runc
// with the same arguments; it never returns then. Neither is networking,
// which is what the rigs exercise. Run any other way, it returns at once.
func RunRuncWrapperIfAsked() {
	runc := os.Getenv(runcEnv)
	if runc == "" {
		return
	}
	if marker := os.Getenv(refuseEnv); marker != "" && BundleOf(os.Args[1:]) != "" && exists(marker) {
		fmt.Fprintln(os.Stderr, "runc wrapper: refusing to create a container, as the test asked")
		os.Exit(1)
	}
	if err := DropUnsupportedLimits(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "runc wrapper:", err)
		os.Exit(1)
	}
	err := syscall.Exec(runc, append([]string{"runc"}, os.Args[1:]...), os.Environ())
	fmt.Fprintln(os.Stderr, "runc wrapper: running runc:", err)
	os.Exit(1)
}

// DropUnsupportedLimits edits the config.json of the bundle that args
// name (BundleOf); other commands have none and are left alone.
func DropUnsupportedLimits(args []string) error {
	bundle := BundleOf(args)
	if bundle == "" {
		return nil
	}
	path := filepath.Join(bundle, "config.json")
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // ids and limits stay exact
	var spec map[string]any
	if err := dec.Decode(&spec); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if linux, ok := spec["linux"].(map[string]any); ok {
		delete(linux, "resources")
	}
	if process, ok := spec["process"].(map[string]any); ok {
		delete(process, "oomScoreAdj")
	}
	out, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

// BundleOf is the bundle directory runc's args name (--bundle or -b, as
// `runc create` and `runc run` take it), or "".
func BundleOf(args []string) string {
	bundle := ""
	for i, a := range args {
		switch {
		case (a == "--bundle" || a == "-b") && i+1 < len(args):
			bundle = args[i+1]
		case strings.HasPrefix(a, "--bundle="):
			bundle = strings.TrimPrefix(a, "--bundle=")
		}
	}
	return bundle
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
