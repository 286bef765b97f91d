package fakes_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/seed1280861d/cninet/cninettest/fakes"
)

const masqLine = `-A POSTROUTING -s 198.18.0.2/32 -m comment --comment "name: \"net\" id: \"web-1\"" -j CNI-A`

var masqSpec = []string{"-s", "198.18.0.2/32", "-m", "comment", "--comment", `name: "net" id: "web-1"`, "-j", "CNI-A"}

func TestIPTablesWritesAsIPTablesDoes(t *testing.T) {
	for _, tc := range []struct {
		name    string
		call    func(ipt *fakes.IPTables) (bool, error)
		want    bool
		wantErr string // what the error says; "": none
		after   []string
	}{
		{"Exists finds the rule iptables -S prints for the spec, comment quoted", func(ipt *fakes.IPTables) (bool, error) {
			return ipt.Exists("nat", "POSTROUTING", masqSpec...)
		}, true, "", []string{"-A POSTROUTING -s 198.18.0.9/32 -j ACCEPT", masqLine}},
		{"Exists of another rule is false", func(ipt *fakes.IPTables) (bool, error) {
			return ipt.Exists("nat", "POSTROUTING", "-s", "198.18.0.3/32", "-j", "ACCEPT")
		}, false, "", []string{"-A POSTROUTING -s 198.18.0.9/32 -j ACCEPT", masqLine}},
		{"Exists in a chain that is not there is false, as -C's exit status 1", func(ipt *fakes.IPTables) (bool, error) {
			return ipt.Exists("nat", "CNI-NOPE", masqSpec...)
		}, false, "", []string{"-A POSTROUTING -s 198.18.0.9/32 -j ACCEPT", masqLine}},
		{"ChainExists", func(ipt *fakes.IPTables) (bool, error) { return ipt.ChainExists("nat", "CNI-A") }, true, "",
			[]string{"-A POSTROUTING -s 198.18.0.9/32 -j ACCEPT", masqLine}},
		{"a new chain that exists is an error", func(ipt *fakes.IPTables) (bool, error) { return false, ipt.NewChain("nat", "CNI-A") },
			false, "Chain already exists", []string{"-A POSTROUTING -s 198.18.0.9/32 -j ACCEPT", masqLine}},
		{"Insert at 1 goes first", func(ipt *fakes.IPTables) (bool, error) {
			return false, ipt.Insert("nat", "POSTROUTING", 1, "-s", "198.18.0.3/32", "-j", "ACCEPT")
		}, false, "", []string{"-A POSTROUTING -s 198.18.0.3/32 -j ACCEPT", "-A POSTROUTING -s 198.18.0.9/32 -j ACCEPT", masqLine}},
		{"Insert after the last rule goes last", func(ipt *fakes.IPTables) (bool, error) {
			return false, ipt.Insert("nat", "POSTROUTING", 3, "-s", "198.18.0.3/32", "-j", "ACCEPT")
		}, false, "", []string{"-A POSTROUTING -s 198.18.0.9/32 -j ACCEPT", masqLine, "-A POSTROUTING -s 198.18.0.3/32 -j ACCEPT"}},
		{"Insert past it is an error", func(ipt *fakes.IPTables) (bool, error) {
			return false, ipt.Insert("nat", "POSTROUTING", 4, "-j", "ACCEPT")
		}, false, "Index of insertion too big", []string{"-A POSTROUTING -s 198.18.0.9/32 -j ACCEPT", masqLine}},
		{"Append to a chain that is not there is an error", func(ipt *fakes.IPTables) (bool, error) {
			return false, ipt.Append("nat", "CNI-NOPE", "-j", "ACCEPT")
		}, false, "No chain/target/match", []string{"-A POSTROUTING -s 198.18.0.9/32 -j ACCEPT", masqLine}},
		{"FailWrite fails a write of its chain", func(ipt *fakes.IPTables) (bool, error) {
			ipt.FailWrite["nat/POSTROUTING"] = errors.New("iptables: lock held (exit status 4)")
			return false, ipt.Append("nat", "POSTROUTING", "-j", "ACCEPT")
		}, false, "lock held", []string{"-A POSTROUTING -s 198.18.0.9/32 -j ACCEPT", masqLine}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ipt := fakes.NewIPTables().Load("nat", "-N CNI-A\n-A POSTROUTING -s 198.18.0.9/32 -j ACCEPT\n"+masqLine)
			got, err := tc.call(ipt)
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tc.wantErr)
			}
			if got != tc.want {
				t.Errorf("answer = %v, want %v", got, tc.want)
			}
			if after := ipt.Rules("nat", "POSTROUTING"); !slices.Equal(after, tc.after) {
				t.Errorf("POSTROUTING after: %q\nwant %q", after, tc.after)
			}
		})
	}
}

func TestNewChainMakesAnEmptyChain(t *testing.T) {
	ipt := fakes.NewIPTables()
	if err := ipt.NewChain("nat", "CNI-B"); err != nil {
		t.Fatal(err)
	}
	if !ipt.HasChain("nat", "CNI-B") || len(ipt.Rules("nat", "CNI-B")) != 0 {
		t.Errorf("after NewChain: chain there %v with rules %q; want it, empty", ipt.HasChain("nat", "CNI-B"), ipt.Rules("nat", "CNI-B"))
	}
	if err := ipt.Append("nat", "CNI-B", "-j", "MASQUERADE"); err != nil {
		t.Fatal(err)
	}
	if ok, err := ipt.Exists("nat", "CNI-B", "-j", "MASQUERADE"); !ok || err != nil {
		t.Errorf("Exists of the appended rule = %v, %v", ok, err)
	}
}
