package host_test

import (
	"fmt"
	"strings"

	"github.com/coreos/go-iptables/iptables"

	"github.com/seed1280861d/cninet/host"
)

// go-iptables' own type is an IPTables as it is.
var _ host.IPTables = (*iptables.IPTables)(nil)

// loggingIPTables wraps an IPTables and logs every deletion. It offers no
// optional extension, so cleanup through it takes the slow way: it lists
// chain by chain and deletes rule by rule.
type loggingIPTables struct {
	host.IPTables
	log *strings.Builder
}

func (l loggingIPTables) Delete(table, chain string, rulespec ...string) error {
	fmt.Fprintf(l.log, "delete %s %s %s\n", table, chain, strings.Join(rulespec, " "))
	return l.IPTables.Delete(table, chain, rulespec...)
}

// memTables is the smallest IPTables: one table's chains in memory.
type memTables map[string][]string

func (m memTables) List(_, chain string) ([]string, error) { return m[chain], nil }
func (m memTables) Delete(_, chain string, rulespec ...string) error {
	spec := "-A " + chain + " " + strings.Join(rulespec, " ")
	for i, r := range m[chain] {
		if r == spec {
			m[chain] = append(m[chain][:i], m[chain][i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("no such rule: %s", spec)
}
func (m memTables) ClearAndDeleteChain(_, chain string) error { delete(m, chain); return nil }

// A wrapper keeps the base interface and hides the extensions of what it
// wraps unless it offers them itself: cleanup looks for them with a type
// assertion.
func Example() {
	var log strings.Builder
	var ipt host.IPTables = loggingIPTables{IPTables: memTables{"CNI-FORWARD": {"-A CNI-FORWARD -s 198.18.0.2/32 -j ACCEPT"}}, log: &log}

	_, streams := ipt.(host.SaveStreamer)
	_, binds := ipt.(host.ContextBinder)
	fmt.Println("streams iptables-save:", streams, "binds a context:", binds)

	if err := ipt.Delete("filter", "CNI-FORWARD", "-s", "198.18.0.2/32", "-j", "ACCEPT"); err != nil {
		fmt.Println(err)
	}
	rules, _ := ipt.List("filter", "CNI-FORWARD")
	fmt.Print(log.String())
	fmt.Println("left:", len(rules))
	// Output:
	// streams iptables-save: false binds a context: false
	// delete filter CNI-FORWARD -s 198.18.0.2/32 -j ACCEPT
	// left: 0
}
