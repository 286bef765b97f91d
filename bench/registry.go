package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/identity"
	"github.com/seed1280861d/cninet/internal/registry"
)

// statusTarget is the most `cninet status --attachments` may take over
// -status-n records (its median wall time, either output format).
const statusTarget = time.Second

// statusResult is `cninet status --attachments` over a host registry of N
// records, as text and as JSON.
type statusResult struct {
	N           int
	RecordBytes int           // a record's size on disk, on average
	Write       time.Duration // writing the records
	Text, JSON  sample        // wall time per run, start to exit
	TextCPU     sample        // user + system time per run
	JSONCPU     sample
	TextSys     sample // of it, system time per run
	JSONSys     sample
}

// slowest is the slower format's median.
func (s *statusResult) slowest() time.Duration { return max(s.Text.median(), s.JSON.median()) }

// registryStatus: a host registry of -status-n records, written in the
// registry's layout (internal/registry: attachments/<id>/<network>/<ifname>,
// one JSON record each, of the format Setup writes: owner, network, id,
// interface, netns, state, addresses, args, port mappings, the conflist
// bytes, the plugins with their backends), listed by the cninet binary
// (`status --attachments`, text and `-o json`), -status-runs times each,
// interleaved; the JSON listing is checked to hold every record.
func registryStatus(r *report) error {
	dir, err := os.MkdirTemp("", "cninet-status-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	res := &statusResult{N: r.opts.statusN}
	start := time.Now()
	size, err := writeRecords(filepath.Join(dir, "state"), res.N)
	if err != nil {
		return fmt.Errorf("writing %d records: %w", res.N, err)
	}
	res.Write, res.RecordBytes = time.Since(start), size/max(res.N, 1)
	bin := filepath.Join(dir, "cninet")
	build := exec.Command("go", "build", "-o", bin, "./cmd/cninet")
	build.Dir = ".." // the repository: bench runs from bench/
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("building cninet: %w: %s", err, out)
	}
	args := []string{"status", "--attachments", "--state-dir", filepath.Join(dir, "state")}
	if err := checkListing(bin, args, res.N); err != nil {
		return err
	}
	for i := range r.opts.statusRuns {
		for _, asJSON := range []bool{i%2 == 0, i%2 != 0} {
			a := args
			if asJSON {
				a = append(append([]string(nil), args...), "-o", "json")
			}
			cmd := exec.Command(bin, a...) // output to /dev/null
			start := time.Now()
			if err := cmd.Run(); err != nil {
				return fmt.Errorf("cninet %v: %w", a, err)
			}
			d, sys := time.Since(start), cmd.ProcessState.SystemTime()
			cpu := cmd.ProcessState.UserTime() + sys
			if asJSON {
				res.JSON, res.JSONCPU, res.JSONSys = append(res.JSON, d), append(res.JSONCPU, cpu), append(res.JSONSys, sys)
			} else {
				res.Text, res.TextCPU, res.TextSys = append(res.Text, d), append(res.TextCPU, cpu), append(res.TextSys, sys)
			}
		}
	}
	fmt.Fprintf(os.Stderr, "bench:   status --attachments over %d records: text %s, json %s (medians)\n", res.N, ms(res.Text.median()), ms(res.JSON.median()))
	r.res.Status = res
	return nil
}

// checkListing runs the listing once with -o json (unmeasured: it also
// warms the page cache for every run alike) and checks that it lists n
// attachments and succeeded.
func checkListing(bin string, args []string, n int) error {
	var out bytes.Buffer
	cmd := exec.Command(bin, append(append([]string(nil), args...), "-o", "json")...)
	cmd.Stdout = &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("cninet status --attachments: %w: %s", err, out.Bytes())
	}
	var env struct {
		OK     bool `json:"ok"`
		Result struct {
			Attachments []json.RawMessage `json:"attachments"`
		} `json:"result"`
	}
	if err := json.Unmarshal(out.Bytes(), &env); err != nil {
		return fmt.Errorf("cninet status --attachments -o json: %w", err)
	}
	if !env.OK || len(env.Result.Attachments) != n {
		return fmt.Errorf("cninet status --attachments -o json: ok %v, %d attachments; want %d", env.OK, len(env.Result.Attachments), n)
	}
	return nil
}

// statusNetworks are the networks the records are spread over, and
// statusOwners their owners.
var (
	statusNetworks = []string{"web", "db", "cache", "batch"}
	statusOwners   = []string{"nomad", "containerd", "cninet-daemon"}
)

// writeRecords writes n attached records under the state directory dir
// and returns the bytes written. They are written as the registry lays
// them out, without its fsyncs: only the listing is measured.
func writeRecords(dir string, n int) (int, error) {
	confs := map[string][]byte{}
	for i, name := range statusNetworks {
		cfg := cninet.DefaultBridgeConfig()
		cfg.NetworkName, cfg.BridgeName = name, "statusbr"+fmt.Sprint(i)
		cfg.IPv4Subnet = fmt.Sprintf("10.%d.0.0/16", 100+i)
		conf, err := cninet.BridgeConfList(cfg)
		if err != nil {
			return 0, err
		}
		confs[name] = conf
	}
	since := time.Date(2026, 11, 25, 12, 0, 0, 0, time.UTC)
	total := 0
	for i := range n {
		id := fmt.Sprintf("status-%05d-%08x", i, uint32(i)*2654435761)
		network := statusNetworks[i%len(statusNetworks)]
		alloc := benchAlloc(id, 20000+i%40000)
		mappings, err := cninet.PortMappings(alloc, false)
		if err != nil {
			return 0, err
		}
		ports, err := json.Marshal(mappings)
		if err != nil {
			return 0, err
		}
		net := i % len(statusNetworks)
		rec := registry.Record{
			Version: registry.FormatVersion, Owner: statusOwners[i%len(statusOwners)],
			Key:   identity.Key{Network: network, ID: id, IfName: "eth0"},
			NetNS: fmt.Sprintf("/var/run/netns/%s", id), State: registry.Attached,
			Addresses: []netip.Addr{netip.AddrFrom4([4]byte{10, byte(100 + net), byte(i / 250), byte(2 + i%250)}),
				netip.MustParseAddr(fmt.Sprintf("fd00:%d::%x", 100+net, 2+i))},
			Args:         [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"NOMAD_ALLOC_ID", id}},
			Capabilities: map[string]json.RawMessage{"portMappings": ports},
			ConfList:     confs[network],
			Plugins: []registry.Plugin{{Type: "loopback"}, {Type: "bridge", Backend: "iptables"},
				{Type: "firewall", Backend: "iptables"}, {Type: "portmap", Backend: "iptables"}},
			Since: since.Add(time.Duration(i) * time.Second), Updated: since.Add(time.Duration(i)*time.Second + 150*time.Millisecond),
		}
		raw, err := json.Marshal(rec)
		if err != nil {
			return 0, err
		}
		netDir := filepath.Join(dir, "attachments", id, network)
		if err := os.MkdirAll(netDir, 0o700); err != nil {
			return 0, err
		}
		if err := os.WriteFile(filepath.Join(netDir, rec.IfName), raw, 0o600); err != nil {
			return 0, err
		}
		total += len(raw)
	}
	return total, nil
}

func (r *report) statusSection(w writer) {
	w("## 9. Host registry: `cninet status --attachments`\n\n")
	w("%s", r.when("registry-status"))
	s := r.res.Status
	if s == nil {
		w("(not measured)\n\n")
		return
	}
	w("A host registry of %d records (attached, spread over %d networks and %d owners), written in the registry's layout (`attachments/<id>/<network>/<ifname>`, one JSON record each, as Setup writes them: owner, network, id, interface, netns, state, addresses, CNI args, port mappings, the conflist bytes (the default bridge conflist, %d bytes), the plugins with their backends; %d bytes a record on average), then listed by the `cninet` binary built from this repository: `cninet status --attachments --state-dir DIR`, as a table and with `-o json`, output to /dev/null. One unmeasured `-o json` run first checks that the listing holds every record (and warms the page cache for all runs alike); then %d runs per format, interleaved. Wall time from start to exit; CPU is the process's user + system time.\n\n",
		s.N, len(statusNetworks), len(statusOwners), statusConfBytes(), s.RecordBytes, len(s.Text))
	w("| command | records | median wall time | min | max | CPU (median) | of it system time (median) | target | |\n|---|---|---|---|---|---|---|---|---|\n")
	for _, f := range []struct {
		name           string
		wall, cpu, sys sample
	}{{"`cninet status --attachments`", s.Text, s.TextCPU, s.TextSys}, {"`cninet status --attachments -o json`", s.JSON, s.JSONCPU, s.JSONSys}} {
		sorted := f.wall.sorted()
		w("| %s | %d | **%s** | %s | %s | %s | %s | < %s | %s |\n", f.name, s.N, ms(f.wall.median()), ms(sorted[0]), ms(sorted[len(sorted)-1]),
			ms(f.cpu.median()), registryMs(f.sys), seconds(statusTarget), verdict(f.wall.median() < statusTarget))
	}
	w("\nTarget: < %s over %d records, in either format.", seconds(statusTarget), s.N)
	if s.slowest() >= statusTarget {
		w(" Missed: the listing reads the registry's layout whole, one directory per id, one per network under it and one file per record, each record's summary decoded (its conflist checked, not kept), the ids shared among as many goroutines as CPUs; the system time above is that walk's (opening and listing %d directories and reading %d files), the rest of the CPU is decoding, the output and the Go runtime (allocation, collection). A wall time well above the CPU time is time spent waiting for a CPU that other work on the machine held.", 2*s.N, s.N)
	}
	w("\n\n")
}

func seconds(d time.Duration) string { return fmt.Sprintf("%g s", d.Seconds()) }

// statusConfBytes is the size of the records' conflist.
func statusConfBytes() int {
	cfg := cninet.DefaultBridgeConfig()
	cfg.NetworkName, cfg.BridgeName, cfg.IPv4Subnet = statusNetworks[0], "statusbr0", "10.100.0.0/16"
	conf, _ := cninet.BridgeConfList(cfg)
	return len(conf)
}
