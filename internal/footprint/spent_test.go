package footprint_test

import (
	"context"
	"testing"

	"github.com/seed1280861d/cninet/cninettest/fakes"
	"github.com/seed1280861d/cninet/host"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/hostwork"
)

// Each phase of a Teardown says where its time went on the host: the
// prevention's reads, then the cleanup's, each taken once.
func TestTakeSpentCountsEachPhasesReadsAndWritesOnce(t *testing.T) {
	cases := []struct {
		name    string
		capture string
		files   []hostFile
		id      string
		del     func(t *testing.T, s *scenario)
		// what the cleanup must have spent at least (lists, lines,
		// writes, execs) and at most (lists, writes, execs; -1: no limit)
		minLists, minLines, minWrites, minExecs int
		maxLists, maxWrites, maxExecs           int
	}{
		{
			name: "a cleanup after a DEL that removed everything only probes", capture: "single-after-del",
			files: join(net1Dir, web1Files), id: "web-1",
			del:      func(t *testing.T, s *scenario) { s.remove(t, paths(web1Files)) },
			maxLists: 0, maxWrites: 0, maxExecs: 0,
		},
		{
			name: "a cleanup of what a DEL left lists, writes and runs commands", capture: "leaked-no-del",
			files: join(net1Dir3, live1Reserved, crash1Reserved, []hostFile{live1Cached, crash1Cached}), id: "crash-1",
			del:      func(*testing.T, *scenario) {},
			minLists: 1, minLines: 1, minWrites: 1, minExecs: 1, maxLists: -1, maxWrites: -1, maxExecs: -1,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := newScenario(t, tc.capture, nftnet1, "eth0", tc.files)
			cl := footprint.NewCleaner(context.Background(), s.net, footprint.Seams{
				IPTables: func(v6 bool) (host.IPTables, error) { return fakes.NewProbing(s.ipt[b2i(v6)]), nil },
				NFTables: func() (host.NFTables, error) { return fakes.Matching{NFTables: s.nft}, nil },
			})
			if _, err := cl.Prevent([]string{tc.id}); err != nil {
				t.Fatal(err)
			}
			prevent := cl.TakeSpent()
			if prevent.Files.N == 0 {
				t.Errorf("the prevention read no file: %s", prevent)
			}
			tc.del(t, s)
			if _, err := cl.Clean([]string{tc.id}); err != nil {
				t.Fatal(err)
			}
			clean := cl.TakeSpent()
			if clean.Probes.N == 0 {
				t.Errorf("the cleanup probed nothing: %s", clean)
			}
			if clean.Lists.N < tc.minLists || clean.Lines < tc.minLines || clean.Writes.N < tc.minWrites || clean.Execs < tc.minExecs {
				t.Errorf("the cleanup spent %s; want at least %d lists of %d lines, %d writes, %d execs", clean, tc.minLists, tc.minLines, tc.minWrites, tc.minExecs)
			}
			for _, c := range []struct {
				what     string
				got, max int
			}{{"lists", clean.Lists.N, tc.maxLists}, {"writes", clean.Writes.N, tc.maxWrites}, {"execs", clean.Execs, tc.maxExecs}} {
				if c.max >= 0 && c.got > c.max {
					t.Errorf("the cleanup made %d %s, want at most %d: %s", c.got, c.what, c.max, clean)
				}
			}
			if listed := listingCalls(s); prevent.Lists.N+clean.Lists.N != len(listed) {
				t.Errorf("%d + %d listings counted, the host was asked for %d: %q", prevent.Lists.N, clean.Lists.N, len(listed), listed)
			}
			if clean.Longest.What == "" || clean.Longest.Took > clean.Total() {
				t.Errorf("longest step %q %s of a total %s", clean.Longest.What, clean.Longest.Took, clean.Total())
			}
			if again := cl.TakeSpent(); again != (hostwork.Spent{}) {
				t.Errorf("taken twice: %s", again)
			}
		})
	}
}
