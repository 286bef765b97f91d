//go:build ignore

// kprobe shows what knftables v0.0.18 returns; see ../README.md.
package main

import (
	"context"
	"fmt"
	"os"

	"sigs.k8s.io/knftables"
)

func show(tag string, rules []*knftables.Rule, err error) {
	fmt.Printf("%s: err=%v IsNotFound=%v n=%d\n", tag, err, knftables.IsNotFound(err), len(rules))
	for _, r := range rules {
		c, h := "<nil>", -1
		if r.Comment != nil {
			c = *r.Comment
		}
		if r.Handle != nil {
			h = *r.Handle
		}
		fmt.Printf("   Chain=%q Rule=%q Handle=%d Comment=%q Index=%v\n", r.Chain, r.Rule, h, c, r.Index)
	}
}

func main() {
	ctx := context.Background()
	mode := os.Args[1]
	if mode == "fake" {
		f := knftables.NewFake(knftables.IPv4Family, "cni_hostport")
		r, err := f.ListRules(ctx, "hostports")
		show("fake, no table", r, err)
		tx := f.NewTransaction()
		tx.Add(&knftables.Table{})
		tx.Add(&knftables.Chain{Name: "hostports"})
		tx.Add(&knftables.Chain{Name: "masquerading", Type: knftables.PtrTo(knftables.NATType), Hook: knftables.PtrTo(knftables.PostroutingHook), Priority: knftables.PtrTo(knftables.SNATPriority)})
		tx.Add(&knftables.Rule{Chain: "hostports", Rule: "tcp dport 28080 dnat to 198.18.1.2:8080", Comment: knftables.PtrTo("web-1")})
		tx.Add(&knftables.Rule{Chain: "masquerading", Rule: "ip saddr 198.18.1.2 ip daddr 198.18.1.2 masquerade", Comment: knftables.PtrTo("web-1")})
		fmt.Println("fake run:", f.Run(ctx, tx))
		r, err = f.ListRules(ctx, "nosuch")
		show("fake, no chain", r, err)
		r, err = f.ListRules(ctx, "")
		show("fake, chain \"\"", r, err)
		r, err = f.ListRules(ctx, "hostports")
		show("fake, hostports", r, err)
		tx = f.NewTransaction()
		tx.Delete(&knftables.Rule{Chain: "hostports", Handle: r[0].Handle})
		fmt.Println("fake delete by handle:", f.Run(ctx, tx))
		tx = f.NewTransaction()
		tx.Delete(&knftables.Rule{Chain: "hostports", Handle: knftables.PtrTo(9999)})
		err = f.Run(ctx, tx)
		fmt.Println("fake delete missing handle:", err, knftables.IsNotFound(err))
		fmt.Print("fake dump:\n", f.Dump())
		return
	}
	nft, err := knftables.New(knftables.Family(os.Args[2]), os.Args[3])
	if err != nil {
		fmt.Println("New error:", err)
		return
	}
	switch mode {
	case "list":
		r, err := nft.ListRules(ctx, os.Args[4])
		show(fmt.Sprintf("real %s %s chain=%q", os.Args[2], os.Args[3], os.Args[4]), r, err)
	case "delete":
		var h int
		fmt.Sscan(os.Args[5], &h)
		tx := nft.NewTransaction()
		tx.Delete(&knftables.Rule{Chain: os.Args[4], Handle: &h})
		fmt.Print("tx: ", tx.String())
		err := nft.Run(ctx, tx)
		fmt.Printf("delete err=%v IsNotFound=%v\n", err, knftables.IsNotFound(err))
	case "empty":
		err := nft.Run(ctx, nft.NewTransaction())
		fmt.Printf("empty tx err=%v\n", err)
	}
}
