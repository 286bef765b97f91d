package footprint

import (
	"fmt"
	"testing"

	"github.com/seed1280861d/cninet/internal/iptables"
)

// BenchmarkParseListing parses a 10,000-rule `iptables -S` listing.
func BenchmarkParseListing(b *testing.B) {
	lines := make([]string, 0, 10000)
	for i := 0; len(lines) < 10000; i++ {
		o := Attachment{Network: "nomad", ID: fmt.Sprintf("alloc-%05d", i)}
		lines = append(lines,
			fmt.Sprintf(`-A POSTROUTING -s 198.18.%d.%d/32 -m comment --comment "name: \"nomad\" id: \"%s\"" -j %s`, i/250, i%250, o.ID, o.MasqChain()),
			fmt.Sprintf(`-A %s ! -d 224.0.0.0/4 -m comment --comment "name: \"nomad\" id: \"%s\"" -j MASQUERADE`, o.MasqChain(), o.ID),
		)
	}
	b.ReportAllocs()
	for b.Loop() {
		if l := iptables.ParseListing(lines, nil); len(l.Chains) == 0 {
			b.Fatal("nothing parsed")
		}
	}
}
