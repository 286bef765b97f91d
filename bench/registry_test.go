package main

import (
	"testing"

	"github.com/seed1280861d/cninet/internal/registry"
)

// The records registry-status lists are records the registry reads:
// every one usable, none damaged, with its port mappings and conflist.
func TestWrittenRecordsAreTheRegistrys(t *testing.T) {
	dir := t.TempDir()
	const n = 25
	if _, err := writeRecords(dir, n); err != nil {
		t.Fatal(err)
	}
	reg, err := registry.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	all, err := reg.All()
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Records) != n || len(all.Damaged) != 0 {
		t.Fatalf("the registry reads %d records and %d damaged files (%v), want %d and none", len(all.Records), len(all.Damaged), all.Damaged, n)
	}
	for _, r := range all.Records {
		if r.State != registry.Attached || len(r.Addresses) != 2 || len(r.Capabilities["portMappings"]) == 0 || len(r.ConfList) < 500 {
			t.Errorf("record %s: state %s, %d addresses, port mappings %s, %d conflist bytes; want attached, 2, some, a whole conflist",
				r.Key, r.State, len(r.Addresses), r.Capabilities["portMappings"], len(r.ConfList))
		}
	}
}
