package sandbox

import (
	"fmt"

	"io/fs"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"

	"github.com/seed1280861d/cninet/internal/nftables"
)

// Snapshot is the state an attachment can leave on a host.
type Snapshot struct {
	Rules map[string]bool // "iptables nat -A ...", "ip6tables filter :CHAIN"
	Files map[string]bool
	Links map[string]bool
}

// stateDirs are where plugins and libcni keep per-attachment files.
var stateDirs = []string{"/run/cni", "/var/lib/cni", "/var/lib/cninet"}

// TakeSnapshot reads iptables and ip6tables (nat and filter), the
// per-attachment rules of the plugins' nftables tables, the files under
// the CNI state directories, and the network links.
func TakeSnapshot() (Snapshot, error) {
	s := Snapshot{Rules: map[string]bool{}, Files: map[string]bool{}, Links: map[string]bool{}}
	if err := snapshotNFT(s.Rules); err != nil {
		return s, err
	}
	for _, family := range []string{"iptables", "ip6tables"} {
		for _, table := range []string{"nat", "filter"} {
			out, err := exec.Command(family+"-save", "-t", table).Output()
			if err != nil {
				return s, fmt.Errorf("%s-save -t %s: %w", family, table, err)
			}
			for _, line := range strings.Split(string(out), "\n") {
				switch {
				case strings.HasPrefix(line, "-A "):
					s.Rules[family+" "+table+" "+line] = true
				case strings.HasPrefix(line, ":"):
					s.Rules[family+" "+table+" "+strings.Fields(line)[0]] = true
				}
			}
		}
	}
	for _, dir := range stateDirs {
		filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				s.Files[path] = true
			}
			return nil
		})
	}
	out, err := exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		return s, fmt.Errorf("ip link: %w", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); len(f) > 1 {
			s.Links[strings.SplitN(strings.TrimSuffix(f[1], ":"), "@", 2)[0]] = true
		}
	}
	return s, nil
}

// sharedChains are created once per host by the plugins and used by every
// attachment; they are not anybody's leak.
var sharedChains = map[string]bool{
	"CNI-HOSTPORT-DNAT": true, "CNI-HOSTPORT-SETMARK": true, "CNI-HOSTPORT-MASQ": true,
	"CNI-FORWARD": true, "CNI-ADMIN": true, "CNI-HOSTPORT-SNAT": true,
}

// Allowance says what shared infrastructure a test's configuration
// creates besides sharedChains: its admin chain and bridge.
type Allowance struct {
	Chains, Links []string
}

// Leaks returns what is in now but not in baseline and is not shared
// infrastructure: per-attachment rules and chains, reservation and cache
// files, host-side veths.
func Leaks(baseline, now Snapshot, allow Allowance) []string {
	shared := map[string]bool{}
	for c := range sharedChains {
		shared[c] = true
	}
	for _, c := range allow.Chains {
		shared[c] = true
	}
	var leaks []string
	for r := range now.Rules {
		if !baseline.Rules[r] && !isSharedRule(r, shared) {
			leaks = append(leaks, r)
		}
	}
	for f := range now.Files {
		base := filepath.Base(f)
		// Lock files are the plugins' and the host registry's, kept for
		// every attachment to come: no one's leak.
		if !baseline.Files[f] && base != "lock" && !strings.HasPrefix(base, "last_reserved_ip") && !strings.Contains(f, "/cninet/locks/") {
			leaks = append(leaks, "file "+f)
		}
	}
	allowed := map[string]bool{}
	for _, l := range allow.Links {
		allowed[l] = true
	}
	for l := range now.Links {
		if !baseline.Links[l] && !allowed[l] {
			leaks = append(leaks, "link "+l)
		}
	}
	sort.Strings(leaks)
	return leaks
}

// isSharedRule reports a chain declaration of a shared chain, a jump into
// one from a built-in chain, and the rules inside the portmap mark chains.
func isSharedRule(entry string, shared map[string]bool) bool {
	f := strings.Fields(entry) // family table (:CHAIN | -A CHAIN ...)
	if len(f) < 3 {
		return false
	}
	if strings.HasPrefix(f[2], ":") {
		return shared[strings.TrimPrefix(f[2], ":")]
	}
	if len(f) < 4 {
		return false
	}
	chain, target := f[3], ""
	for i := 4; i+1 < len(f); i++ {
		if f[i] == "-j" {
			target = f[i+1]
		}
	}
	switch {
	case chain == "CNI-HOSTPORT-SETMARK" || chain == "CNI-HOSTPORT-MASQ":
		return true
	case strings.ToUpper(chain) == chain && !strings.HasPrefix(chain, "CNI-") && shared[target]:
		return true // PREROUTING/OUTPUT/POSTROUTING/FORWARD into a shared chain
	case chain == "CNI-FORWARD" && shared[target]:
		return true // the firewall plugin's jump to the admin chain
	}
	return false
}

// nftTables are the tables the plugins' nftables backends write.
var nftTables = map[string]bool{"cni_plugins_masquerade": true, "cni_hostport": true}

// snapshotNFT adds the rules of the plugins' nftables tables that carry a
// comment: those are per attachment (the uncommented ones jump between
// the shared chains). A host without nft has none.
func snapshotNFT(rules map[string]bool) error {
	if _, err := exec.LookPath("nft"); err != nil {
		return nil
	}
	out, err := exec.Command("nft", "-j", "list", "ruleset").Output()
	if err != nil {
		return fmt.Errorf("nft -j list ruleset: %w", err)
	}
	parsed, err := nftables.ParseListing(out)
	if err != nil {
		return err
	}
	for _, r := range parsed {
		if nftTables[r.Table] && r.Comment != "" {
			rules["nft "+r.String()] = true
		}
	}
	return nil
}
