package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// The rule writes a runner makes itself (a repair's masquerade rules
// through iptables and ip6tables, its nft scripts, the repair watcher's
// batch through iptables-restore and ip6tables-restore) are kill points
// too: killwrap installed as one of those commands wraps it.
// KILLWRAP_RUNNER names the runner (its pid), which sets it before it
// runs anything: the same commands its plugins run (their children, not
// the runner's) are not counted, and neither is a listing.

// wrapsCommand reports whether killwrap runs as the command name.
func wrapsCommand(name string) bool {
	switch name {
	case "iptables", "ip6tables", "nft", "iptables-restore", "ip6tables-restore":
		return true
	}
	return false
}

// wrapCommand runs the real command name with this process's arguments,
// input and output; a write by the runner is then counted (a line "<n>
// WRITE <name> <what> <exit code>") and may kill the runner. It returns
// the real command's exit code.
func wrapCommand(name string) int {
	real, err := findCommand(name)
	if err != nil {
		fmt.Fprintln(os.Stderr, "killwrap:", err)
		return 1
	}
	dir, what := os.Getenv("KILLWRAP_DIR"), writeOf(name, os.Args[1:])
	if dir == "" || what == "" || os.Getenv("KILLWRAP_RUNNER") != strconv.Itoa(os.Getppid()) {
		err := syscall.Exec(real, append([]string{real}, os.Args[1:]...), os.Environ())
		fmt.Fprintf(os.Stderr, "killwrap: exec %s: %v\n", real, err)
		return 1
	}
	running := filepath.Join(dir, fmt.Sprintf("running-%d", os.Getpid()))
	if err := os.WriteFile(running, nil, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "killwrap:", err)
		return 1
	}
	defer os.Remove(running)
	cmd := exec.Command(real, os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	code := 0
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			fmt.Fprintln(os.Stderr, "killwrap:", err)
			return 1
		}
		code = exit.ExitCode()
	}
	n, err := count(dir, fmt.Sprintf("WRITE %s %s %d", name, what, code))
	if err != nil {
		fmt.Fprintln(os.Stderr, "killwrap:", err)
		return 1
	}
	if at, _ := strconv.Atoi(os.Getenv("KILLWRAP_KILL_AT")); at > 0 && n == at {
		// As after a plugin command: frozen until the sampler looked.
		if samples := os.Getenv("KILLWRAP_AWAIT_SAMPLES"); samples != "" {
			syscall.Kill(os.Getppid(), syscall.SIGSTOP)
			awaitSamples(samples)
		}
		syscall.Kill(os.Getppid(), syscall.SIGKILL)
	}
	return code
}

// writeOf says, in one word, what a command line writes ("nat:-A:CHAIN",
// "script", "restore"); "" for one that only reads.
func writeOf(name string, args []string) string {
	if strings.HasSuffix(name, "-restore") {
		if slices.Contains(args, "--test") || slices.Contains(args, "-t") {
			return ""
		}
		return "restore" // what it writes is on its input, which the real command reads
	}
	if name == "nft" {
		if slices.Contains(args, "-f") {
			return "script"
		}
		return ""
	}
	table := "filter"
	for i, a := range args {
		switch a {
		case "-t", "--table":
			if i+1 < len(args) {
				table = args[i+1]
			}
		case "-A", "-I", "-N", "-D", "-R", "-F", "-X", "-Z", "-P", "-E":
			chain := ""
			if i+1 < len(args) {
				chain = args[i+1]
			}
			return strings.Join([]string{table, a, chain}, ":")
		}
	}
	return ""
}

// findCommand is the first program called name on PATH that is not this
// one.
func findCommand(name string) (string, error) {
	self, err := os.Stat("/proc/self/exe")
	if err != nil {
		return "", err
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		path := filepath.Join(dir, name)
		info, err := os.Stat(path)
		if err != nil || info.IsDir() || info.Mode()&0o111 == 0 || os.SameFile(info, self) {
			continue
		}
		return path, nil
	}
	return "", fmt.Errorf("no %s on PATH besides killwrap", name)
}
