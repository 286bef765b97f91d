package integration

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/seed1280861d/cninet/internal/netsandbox"
)

// A burst of 200 concurrent ADDs (then DELs) straight on the daemon's
// socket: every one is queued and served, none fails, each gets its own
// address, the daemon's peak memory stays bounded, and nothing is left.
func TestThickBurstOf200(t *testing.T) {
	netsandbox.Require(t)
	r := newThickRig(t, netsandbox.PluginSets(t)[0], "1.1.0", false)
	base := baseline(t)
	const n = 200
	workloads := make([]*netsandbox.Workload, n)
	for i := range workloads {
		workloads[i] = netsandbox.NewWorkload(t)
	}
	request := func(command string, i int) []byte {
		return []byte(fmt.Sprintf(`{"protocol":1,"command":%q,"containerID":"burst-%d","netns":%q,"ifName":"eth0","config":{"cniVersion":"1.1.0","name":%q,"type":"cninet-shim","runtimeConfig":{"portMappings":[{"hostPort":%d,"containerPort":8080,"protocol":"tcp"}]}}}`,
			command, i, workloads[i].Path, r.name(), 29000+i))
	}
	addrs := make([]string, n)
	failures := make([]string, n)
	run := func(command string) {
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				status, body := r.tryPost(http.MethodPost, request(command, i))
				if status != http.StatusOK {
					failures[i] = fmt.Sprintf("%s %d: HTTP %d %s", command, i, status, body)
					return
				}
				if command == "ADD" {
					var res struct {
						IPs []struct{ Address string } `json:"ips"`
					}
					if json.Unmarshal(body, &res) == nil && len(res.IPs) > 0 {
						addrs[i] = res.IPs[0].Address
					}
				}
			}()
		}
		wg.Wait()
	}
	run("ADD")
	seen := map[string]bool{}
	for i := range n {
		if failures[i] != "" {
			t.Error(failures[i])
		} else if addrs[i] == "" || seen[addrs[i]] {
			t.Errorf("ADD %d got address %q (duplicate: %v)", i, addrs[i], seen[addrs[i]])
		}
		seen[addrs[i]] = true
	}
	peak := peakRSS(t, r.daemon.Process.Pid)
	t.Logf("daemon peak RSS after %d concurrent ADDs: %d MiB", n, peak>>20)
	if peak > 256<<20 {
		t.Errorf("daemon peak RSS %d MiB, want at most 256 MiB", peak>>20)
	}
	clear(failures)
	run("DEL")
	for _, f := range failures {
		if f != "" {
			t.Error(f)
		}
	}
	assertNoLeaks(t, base, r.nw.allowance())
}

// peakRSS is the peak resident set size of process pid, in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/pid/status")
	return 0
}
