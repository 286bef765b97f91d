package main

import (
	"bytes"
	"context"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/seed1280861d/cninet"
	"github.com/seed1280861d/cninet/internal/fakecni"
)

const gcNetwork = "gcbench"

func chainName(prefix, id string) string {
	sum := sha512.Sum512([]byte(gcNetwork + id))
	return (prefix + hex.EncodeToString(sum[:]))[:28]
}

// leak writes, through iptables-restore, what n dead attachments of
// gcNetwork leave when their namespaces were deleted and their runner
// crashed: bridge, portmap and firewall rules in both families, and the
// host-local reservations.
func leak(n int) error {
	var nat4, nat6, filter4, filter6 bytes.Buffer
	for _, b := range []*bytes.Buffer{&nat4, &nat6} {
		b.WriteString("*nat\n:CNI-HOSTPORT-DNAT - [0:0]\n")
	}
	for _, b := range []*bytes.Buffer{&filter4, &filter6} {
		b.WriteString("*filter\n:CNI-FORWARD - [0:0]\n")
	}
	dir := filepath.Join("/run/cni", gcNetwork)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("dead-%05d", i)
		ip4 := fmt.Sprintf("198.18.%d.%d", 100+i/250, 2+i%250)
		ip6 := fmt.Sprintf("fd00:198:18::%x", 2+i)
		writeNat(&nat4, id, ip4+"/32", "224.0.0.0/4", ip4, 30000+i%20000)
		writeNat(&nat6, id, ip6+"/128", "ff00::/8", "["+ip6+"]", 30000+i%20000)
		writeFilter(&filter4, ip4+"/32")
		writeFilter(&filter6, ip6+"/128")
		for _, ip := range []string{ip4, ip6} {
			if err := os.WriteFile(filepath.Join(dir, ip), []byte(id+"\r\neth0"), 0o600); err != nil {
				return err
			}
		}
	}
	for _, job := range []struct {
		cmd string
		in  *bytes.Buffer
	}{{"iptables-restore", &nat4}, {"ip6tables-restore", &nat6}, {"iptables-restore", &filter4}, {"ip6tables-restore", &filter6}} {
		job.in.WriteString("COMMIT\n")
		cmd := exec.Command(job.cmd, "--noflush")
		cmd.Stdin = job.in
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", job.cmd, err, out)
		}
	}
	return nil
}

func writeNat(b *bytes.Buffer, id, host, multicast, dest string, port int) {
	masq, dn := chainName("CNI-", id), chainName("CNI-DN-", id)
	comment := fmt.Sprintf(`"name: \"%s\" id: \"%s\""`, gcNetwork, id)
	dnat := fmt.Sprintf(`"dnat name: \"%s\" id: \"%s\""`, gcNetwork, id)
	fmt.Fprintf(b, ":%s - [0:0]\n:%s - [0:0]\n", masq, dn)
	fmt.Fprintf(b, "-A POSTROUTING -s %s -m comment --comment %s -j %s\n", host, comment, masq)
	fmt.Fprintf(b, "-A %s -d %s -m comment --comment %s -j ACCEPT\n", masq, host, comment)
	fmt.Fprintf(b, "-A %s ! -d %s -m comment --comment %s -j MASQUERADE\n", masq, multicast, comment)
	fmt.Fprintf(b, "-A CNI-HOSTPORT-DNAT -p tcp -m comment --comment %s -m multiport --dports %d -j %s\n", dnat, port, dn)
	fmt.Fprintf(b, "-A %s -p tcp -m tcp --dport %d -j DNAT --to-destination %s:8080\n", dn, port, dest)
}

func writeFilter(b *bytes.Buffer, host string) {
	fmt.Fprintf(b, "-A CNI-FORWARD -d %s -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n", host)
	fmt.Fprintf(b, "-A CNI-FORWARD -s %s -j ACCEPT\n", host)
}

// remaining counts the rules and chains of gcNetwork still in place.
func remaining() (int, error) {
	n := 0
	for _, cmd := range []string{"iptables-save", "ip6tables-save"} {
		out, err := exec.Command(cmd).Output()
		if err != nil {
			return 0, err
		}
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, gcNetwork) || strings.HasPrefix(line, "-A CNI-FORWARD -s") || strings.HasPrefix(line, "-A CNI-FORWARD -d") {
				n++
			}
		}
	}
	entries, _ := os.ReadDir(filepath.Join("/run/cni", gcNetwork))
	for _, e := range entries {
		if e.Name() != "lock" {
			n++
		}
	}
	return n, nil
}

// gcScenario: n leaked attachments swept by one GC vs. one force cleanup
// (Teardown) per dead id, timed, then counted in iptables processes.
func gcScenario(r *report) error {
	n := r.opts.gcN
	for _, counted := range []bool{false, true} {
		for _, sweep := range []bool{true, false} {
			if err := leak(n); err != nil {
				return err
			}
			d, procs, err := collect(n, sweep, counted)
			if err != nil {
				return err
			}
			left, err := remaining()
			if err != nil {
				return err
			}
			if left != 0 {
				return fmt.Errorf("sweep=%v left %d items of %d attachments", sweep, left, n)
			}
			switch {
			case sweep && !counted:
				r.gc.sweep = d
			case !sweep && !counted:
				r.gc.perID = d
			case sweep:
				r.gc.sweepProcs = procs
			default:
				r.gc.perIDProcs = procs
			}
		}
	}
	r.gc.n = n
	return nil
}

func collect(n int, sweep, counted bool) (time.Duration, int, error) {
	var counter string
	if counted {
		shim, file, err := countingShim()
		if err != nil {
			return 0, 0, err
		}
		defer os.RemoveAll(shim)
		oldPath := os.Getenv("PATH")
		os.Setenv("PATH", shim+":"+oldPath)
		defer os.Setenv("PATH", oldPath)
		counter = file
	}
	cfg := cninet.DefaultBridgeConfig()
	cfg.NetworkName, cfg.IPAMDataDir, cfg.IPv4Subnet = gcNetwork, "/run/cni", "198.18.96.0/19"
	conf, err := cninet.BridgeConfList(cfg)
	if err != nil {
		return 0, 0, err
	}
	c, err := cninet.New(cninet.Config{ConfList: conf, CNI: &fakecni.CNI{}})
	if err != nil {
		return 0, 0, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	start := time.Now()
	if sweep {
		if _, err := c.GC(ctx, []string{}); err != nil {
			return 0, 0, err
		}
	} else {
		for i := 0; i < n; i++ {
			if err := c.Teardown(ctx, &cninet.Allocation{ID: fmt.Sprintf("dead-%05d", i)}, ""); err != nil {
				return 0, 0, err
			}
		}
	}
	d := time.Since(start)
	if counter == "" {
		return d, 0, nil
	}
	fi, err := os.Stat(counter)
	if err != nil {
		return d, 0, nil // nothing ran
	}
	return d, int(fi.Size()) - 2, nil // minus the two --version probes of go-iptables' New
}

// countingShim puts iptables wrappers first in PATH that count each
// process they start (one byte each) and exec the real binary.
func countingShim() (dir, counter string, err error) {
	dir, err = os.MkdirTemp("", "ipt-shim-")
	if err != nil {
		return "", "", err
	}
	counter = filepath.Join(dir, "count")
	for _, name := range []string{"iptables", "ip6tables", "iptables-save", "ip6tables-save", "iptables-restore", "ip6tables-restore"} {
		real, err := exec.LookPath(name)
		if err != nil {
			return "", "", err
		}
		script := fmt.Sprintf("#!/bin/sh\nprintf x >> %s\nexec %s \"$@\"\n", counter, real)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(script), 0o755); err != nil {
			return "", "", err
		}
	}
	return dir, counter, nil
}
