// Command killwrap stands in for a CNI plugin, for crash tests that kill
// the runner after its k-th plugin command. Installed (as a symlink or a
// copy) under a plugin's name in a directory that comes first in
// CNI_PATH, it runs the real plugin of that name (the next one in
// CNI_PATH that is not killwrap itself) with the same arguments, input
// and environment.
//
// Without KILLWRAP_DIR in its environment it only execs the real plugin:
// a runner that is not under test sees the plugins unchanged. With it,
// after the real plugin of an ADD, DEL, CHECK, GC or STATUS has exited
// (its result written), killwrap counts the command in KILLWRAP_DIR/count
// (under a file lock: networks attach in parallel), appends a line to
// KILLWRAP_DIR/log ("<n> <command> <plugin> <container id> <exit code>"),
// and when the count reaches KILLWRAP_KILL_AT kills the runner with
// SIGKILL — before the runner could read the result, as an OOM kill or
// an agent restart would. The runner is the process KILLWRAP_RUNNER
// names (its pid), else killwrap's parent: a plugin that another plugin
// runs (the IPAM plugin the bridge plugin runs) kills the runner all
// the same. It then exits as the real plugin
// did. With KILLWRAP_DROP_CACHE set, a kill after a DEL first removes
// libcni's cached result of that attachment, as libcni does once the
// chain's last DEL returned: the runner then dies after the DEL returned
// and before its cleanup. With KILLWRAP_AWAIT_SAMPLES naming a file in
// which the test counts its samples, the runner is stopped (SIGSTOP)
// and the kill waits until a sample was taken wholly after the k-th
// command. While it runs it holds
// KILLWRAP_DIR/running-<pid>, so a test can wait until the plugins a
// killed runner left behind have finished.
//
// Installed as iptables, ip6tables or nft in a directory that comes first
// in the runner's PATH, it wraps that command (commands.go): a rule write
// the runner makes itself, not one of its plugins', is counted in the
// same count and log and kills the runner at KILLWRAP_KILL_AT.
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	name := filepath.Base(os.Args[0])
	if wrapsCommand(name) {
		os.Exit(wrapCommand(name))
	}
	real, err := findReal(name)
	if err != nil {
		fmt.Fprintf(os.Stderr, `{"cniVersion":"1.0.0","code":999,"msg":"killwrap: %s"}`+"\n", err)
		os.Exit(1)
	}
	dir := os.Getenv("KILLWRAP_DIR")
	command := os.Getenv("CNI_COMMAND")
	counted := command == "ADD" || command == "DEL" || command == "CHECK" || command == "GC" || command == "STATUS"
	if dir == "" || !counted {
		err := syscall.Exec(real, append([]string{real}, os.Args[1:]...), os.Environ())
		fmt.Fprintf(os.Stderr, "killwrap: exec %s: %v\n", real, err)
		os.Exit(1)
	}
	running := filepath.Join(dir, fmt.Sprintf("running-%d", os.Getpid()))
	if err := os.WriteFile(running, nil, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "killwrap:", err)
		os.Exit(1)
	}
	code := run(dir, name, real, command)
	os.Remove(running)
	os.Exit(code)
}

// run runs the real plugin, counts the command and kills the runner when
// the count says so; it returns the real plugin's exit code.
func run(dir, name, real, command string) int {
	stdin, err := io.ReadAll(os.Stdin)
	if err != nil {
		fmt.Fprintln(os.Stderr, "killwrap:", err)
		return 1
	}
	cmd := exec.Command(real, os.Args[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = bytes.NewReader(stdin), os.Stdout, os.Stderr
	code := 0
	if err := cmd.Run(); err != nil {
		var exit *exec.ExitError
		if !errors.As(err, &exit) {
			fmt.Fprintln(os.Stderr, "killwrap:", err)
			return 1
		}
		code = exit.ExitCode()
	}
	n, err := count(dir, fmt.Sprintf("%s %s %s %d", command, name, os.Getenv("CNI_CONTAINERID"), code))
	if err != nil {
		fmt.Fprintln(os.Stderr, "killwrap:", err)
		return 1
	}
	if at, _ := strconv.Atoi(os.Getenv("KILLWRAP_KILL_AT")); at > 0 && n == at {
		if os.Getenv("KILLWRAP_DROP_CACHE") != "" && command == "DEL" && code == 0 {
			dropCache(stdin)
		}
		runner := os.Getppid()
		if pid, err := strconv.Atoi(os.Getenv("KILLWRAP_RUNNER")); err == nil && pid > 0 {
			runner = pid
		}
		if samples := os.Getenv("KILLWRAP_AWAIT_SAMPLES"); samples != "" {
			// Frozen first, so that while the sampler looks the runner
			// starts nothing more (another network's chain runs
			// concurrently): it dies where it was when the k-th ended.
			syscall.Kill(runner, syscall.SIGSTOP)
			awaitSamples(samples)
		}
		syscall.Kill(runner, syscall.SIGKILL)
	}
	return code
}

// awaitSamples holds the kill until the test's sampler, which counts its
// samples in the file at path, has taken one wholly after this point: a
// runner killed after its first command may live a few milliseconds,
// less than one sample takes, and a sampler that never looked while the
// runner lived proves nothing. The sample numbered c0+2 began after this
// point and recorded its end before c0+3 began. Bounded, so that a
// sampler that stopped cannot hang the runner.
func awaitSamples(path string) {
	c0 := readCount(path)
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		if readCount(path) >= c0+3 {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// readCount reads the number in the file at path; 0 when there is none.
func readCount(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return n
}

// dropCache removes libcni's cached result of the attachment a DEL was
// for, as libcni does once the chain's last DEL has returned: a kill then
// finds the DEL done and its proof gone.
func dropCache(stdin []byte) {
	var conf struct {
		Name string `json:"name"`
	}
	if json.Unmarshal(stdin, &conf) == nil && conf.Name != "" {
		os.Remove(filepath.Join("/var/lib/cni/results", conf.Name+"-"+os.Getenv("CNI_CONTAINERID")+"-"+os.Getenv("CNI_IFNAME")))
	}
}

// count adds one to dir/count and logs line; it returns the new count.
func count(dir, line string) (int, error) {
	lock, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return 0, err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return 0, err
	}
	path := filepath.Join(dir, "count")
	n := 0
	if b, err := os.ReadFile(path); err == nil {
		n, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	} else if !errors.Is(err, os.ErrNotExist) {
		return 0, err
	}
	n++
	if err := os.WriteFile(path, []byte(strconv.Itoa(n)), 0o644); err != nil {
		return 0, err
	}
	log, err := os.OpenFile(filepath.Join(dir, "log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	defer log.Close()
	_, err = fmt.Fprintf(log, "%d %s\n", n, line)
	return n, err
}

// findReal is the first plugin called name that is not this program, in
// the directories killwrap.path lists, else in CNI_PATH.
func findReal(name string) (string, error) {
	self, err := os.Stat("/proc/self/exe")
	if err != nil {
		return "", err
	}
	dirs := os.Getenv("CNI_PATH")
	if b, err := os.ReadFile(filepath.Join(filepath.Dir(os.Args[0]), "killwrap.path")); err == nil {
		dirs = strings.TrimSpace(string(b))
	}
	for _, dir := range filepath.SplitList(dirs) {
		path := filepath.Join(dir, name)
		info, err := os.Stat(path)
		if err != nil || info.IsDir() || os.SameFile(info, self) {
			continue
		}
		return path, nil
	}
	return "", fmt.Errorf("no plugin %q in %q besides killwrap", name, dirs)
}
