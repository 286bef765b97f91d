//go:build unix

package registry_test

import (
	"context"
	"fmt"
	"log"
	"net/netip"
	"os"

	"github.com/seed1280861d/cninet/internal/identity"
	"github.com/seed1280861d/cninet/internal/registry"
)

func Example() {
	dir, err := os.MkdirTemp("", "registry-example-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	reg, err := registry.Open(dir) // in production: registry.DefaultDir
	if err != nil {
		log.Fatal(err)
	}

	// Every operation on a container id holds the id's lock throughout.
	ctx := context.Background()
	unlock, err := reg.LockID(ctx, "c1")
	if err != nil {
		log.Fatal(err)
	}
	defer unlock()

	// Before the ADD: what the DEL and its cleanup will need.
	r := &registry.Record{
		Owner:    "kubelet",
		Key:      identity.Key{Network: "net1", ID: "c1", IfName: "eth0"},
		State:    registry.Adding,
		ConfList: []byte(`{"cniVersion":"1.0.0","name":"net1","plugins":[{"type":"bridge"}]}`),
	}
	if err := reg.Put(r); err != nil {
		log.Fatal(err)
	}
	// After it: the result's addresses.
	r.State = registry.Attached
	r.AddAddresses(netip.MustParseAddr("10.88.0.2"))
	if err := reg.Put(r); err != nil {
		log.Fatal(err)
	}

	records, damaged, err := reg.Of("c1")
	if err != nil {
		log.Fatal(err)
	}
	for _, rec := range records {
		fmt.Println(rec.Key, rec.Owner, rec.State, rec.Addresses)
	}
	fmt.Println(len(damaged), "damaged")

	// The cleanup found nothing of the attachment left: the record goes.
	if err := reg.Remove(r.Key); err != nil {
		log.Fatal(err)
	}
	records, _, _ = reg.Of("c1")
	fmt.Println(len(records), "records")
	// Output:
	// c1 in network "net1" as eth0 kubelet attached [10.88.0.2]
	// 0 damaged
	// 0 records
}
