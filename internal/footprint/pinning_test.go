package footprint_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/containernetworking/plugins/pkg/utils"
	"github.com/seed1280861d/cninet/internal/footprint"
	"github.com/seed1280861d/cninet/internal/nftables"
	"sigs.k8s.io/knftables"
)

// The names and comments footprint recognises are pinned here against the
// plugins' own code (github.com/containernetworking/plugins/pkg/utils, the
// module version the build uses) and against what the plugins actually
// wrote (testdata/nftables, testdata/iptables). The nftables masquerade
// comment and portmap's DNAT comment are made by unexported plugin code;
// they are pinned through the exported hash they are built from and
// through the captures.

// wantNFTMasqComment is the masquerade comment as the plugins' nftables
// backend documents it: their short hashes of the network and of
// "ifname:id", the three names, cut to nft's 128 bytes.
func wantNFTMasqComment(network, ifName, id string) string {
	c := utils.MustFormatHashWithPrefix(16, "", network) + "-" + utils.MustFormatHashWithPrefix(16, "", ifName+":"+id) +
		", net: " + strings.ReplaceAll(network, `"`, "") + ", if: " + ifName + ", id: " + strings.ReplaceAll(id, `"`, "")
	if len(c) > knftables.CommentLengthMax {
		c = c[:knftables.CommentLengthMax]
	}
	return c
}

// wantDNATComment is portmap's iptables DNAT comment: over 255 bytes it is
// cut to 253 and "..." appended (the toolong capture shows the result).
func wantDNATComment(network, id string) string {
	c := fmt.Sprintf(`dnat name: "%s" id: "%s"`, network, id)
	if len(c) > 255 {
		c = c[:253] + "..."
	}
	return c
}

// pinNetworks and pinIDs are the names the formats are pinned for: plain,
// dotted, with underscores, quotes and non-ASCII, and long enough for
// every comment to be cut.
var pinNetworks = []string{
	"nftnet1", "nomad", "my.net", "under_score_net", "a", "n.e_t-1",
	"net-" + strings.Repeat("n", 60),
	strings.Repeat("n", 120), strings.Repeat("n", 124), strings.Repeat("n", 128),
	strings.Repeat("a.b_c-", 20),
	`we"ird`, "réseau-é", strings.Repeat("é", 60),
}

func pinIDs() []string {
	ids := []string{
		"web-1", "same-1", "ab", "abc", "live-1", "gone-1", "crash-1", "alloc-1", "alloc-10",
		"a.b", "a_b", "A-1.b_2", "9c1f6a4e-23b5-4f6e-8a3b-0d9f7c2e1b44", longID,
		strings.Repeat("a", 119) + "1", strings.Repeat("a", 120) + "10",
		`quo"te`, "idé",
	}
	const alphabet = "abcdefghijklmnopqrstuvwxyz0123456789._-"
	for n := 1; n <= 300; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = alphabet[(i*7+n)%len(alphabet)]
		}
		b[0] = 'a' + byte(n%26)
		ids = append(ids, string(b))
	}
	return ids
}

func TestAttachmentNamesAndCommentsAreThePluginsForManyNetworksAndIDs(t *testing.T) {
	failures, checked := 0, 0
	check := func(what string, a footprint.Attachment, got, want string) {
		checked++
		if got != want && failures < 20 {
			failures++
			t.Errorf("%s of %q/%q = %q, want %q", what, a.Network, a.ID, got, want)
		}
	}
	cut, cutNFT := 0, 0
	for _, network := range pinNetworks {
		for _, id := range pinIDs() {
			a := footprint.Attachment{Network: network, ID: id}
			check("MasqChain", a, a.MasqChain(), utils.FormatChainName(network, id))
			check("DNATChain", a, a.DNATChain(), utils.MustFormatChainNameWithPrefix(network, id, "DN-"))
			check("SNATChain", a, a.SNATChain(), utils.MustFormatChainNameWithPrefix(network, id, "SN-"))
			check("MasqComment", a, a.MasqComment(), utils.FormatComment(network, id))
			check("DNATComment", a, a.DNATComment(), wantDNATComment(network, id))
			if len(a.DNATComment()) > 255 {
				cut++
			}
			for _, ifName := range []string{"eth0", "eth1", "net1"} {
				want := wantNFTMasqComment(network, ifName, id)
				if len(want) == knftables.CommentLengthMax {
					cutNFT++
				}
				check("NFTMasqComment("+ifName+")", a, a.NFTMasqComment(ifName), want)
			}
		}
	}
	if cut == 0 || cutNFT == 0 || checked < 10000 {
		t.Errorf("only %d checks, %d cut DNAT comments, %d cut nftables comments: the pins miss the long names", checked, cut, cutNFT)
	}
}

func TestDNATCommentIsCutToPortmapsLengthAndNoFurther(t *testing.T) {
	prefix := len(`dnat name: "n" id: ""`)
	for _, n := range []int{253 - prefix, 254 - prefix, 255 - prefix, 256 - prefix, 257 - prefix, 300} {
		id := strings.Repeat("a", n)
		full := fmt.Sprintf(`dnat name: "n" id: "%s"`, id)
		got := footprint.Attachment{Network: "n", ID: id}.DNATComment()
		want := full
		if len(full) > 255 {
			want = full[:253] + "..."
		}
		if got != want {
			t.Errorf("DNATComment with a %d-byte comment = %q (%d bytes), want %q", len(full), got, len(got), want)
		}
	}
}

func TestNFTMasqCommentIsTheOneInTheCaptures(t *testing.T) {
	type att struct{ network, ifName, id string }
	// The literal comments from the README, the ones nft listed.
	literal := map[att]string{
		{nftnet1, "eth0", "web-1"}:  "af1f57321b3b4100-0669dafb95dc87d3, net: nftnet1, if: eth0, id: web-1",
		{nftnet2, "eth1", "same-1"}: "e71394455cfea3c9-d788718bcef1e02e, net: nftnet2, if: eth1, id: same-1",
		{nftnet3, "eth0", longID}:   "ad48d015e56d32a8-80fb643f987789a3, net: " + nftnet3 + ", if: eth0, id: long-aaa",
	}
	for a, want := range literal {
		if got := (footprint.Attachment{Network: a.network, ID: a.id}).NFTMasqComment(a.ifName); got != want {
			t.Errorf("NFTMasqComment of %s/%s/%s = %q, want %q", a.network, a.ifName, a.id, got, want)
		}
	}
	if c := literal[att{nftnet3, "eth0", longID}]; len(c) != 128 {
		t.Fatalf("long-id's comment is %d bytes, want 128", len(c))
	}
	for _, tc := range []struct {
		capture string
		atts    []att
	}{
		{"single", []att{{nftnet1, "eth0", "web-1"}}},
		{"two-networks-same-id", []att{{nftnet1, "eth0", "same-1"}, {nftnet2, "eth1", "same-1"}}},
		{"two-networks-same-id-after-del-nftnet1", []att{{nftnet2, "eth1", "same-1"}}},
		{"prefix-ids", []att{{nftnet1, "eth0", "ab"}, {nftnet1, "eth0", "abc"}}},
		{"prefix-ids-after-del-ab", []att{{nftnet1, "eth0", "abc"}}},
		{"long-id", []att{{nftnet3, "eth0", longID}}},
		{"leaked-ns-deleted-before", []att{{nftnet1, "eth0", "live-1"}, {nftnet1, "eth0", "gone-1"}}},
		{"leaked-ns-deleted", []att{{nftnet1, "eth0", "live-1"}, {nftnet1, "eth0", "gone-1"}}},
		{"leaked-no-del", []att{{nftnet1, "eth0", "live-1"}, {nftnet1, "eth0", "crash-1"}}},
		{"hostip-udp", []att{{nftnet1, "eth0", "web-2"}}},
		{"leaked-del-no-portmappings", nil},
		{"single-after-del", nil},
	} {
		t.Run(tc.capture, func(t *testing.T) {
			rules, err := nftables.ParseListing(readCapture(t, tc.capture+".json"))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range rules {
				if r.Table == "cni_plugins_masquerade" && r.Chain == "masq_checks" {
					got = append(got, r.Comment)
				}
			}
			var want []string
			for _, a := range tc.atts {
				c := footprint.Attachment{Network: a.network, ID: a.id}.NFTMasqComment(a.ifName)
				want = append(want, c, c) // one rule per address family
			}
			sort.Strings(got)
			sort.Strings(want)
			if !slices.Equal(got, want) {
				t.Errorf("masquerade comments in %s:\n%q\nwant:\n%q", tc.capture, got, want)
			}
		})
	}
}

// iptablesComment returns the comment of an `iptables -S` line, unquoted.
func iptablesComment(line string) (string, bool) {
	_, rest, ok := strings.Cut(line, " --comment ")
	if !ok {
		return "", false
	}
	if !strings.HasPrefix(rest, `"`) {
		c, _, _ := strings.Cut(rest, " ")
		return c, true
	}
	var b strings.Builder
	for i := 1; i < len(rest); i++ {
		switch rest[i] {
		case '\\':
			i++
			if i < len(rest) {
				b.WriteByte(rest[i])
			}
		case '"':
			return b.String(), true
		default:
			b.WriteByte(rest[i])
		}
	}
	return "", false
}

func iptablesJump(line string) string {
	f := strings.Fields(line)
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "-j" {
			return f[i+1]
		}
	}
	return ""
}

// stored is what iptables keeps of a comment: its first 255 bytes.
func stored(comment string) string {
	if len(comment) > 255 {
		return comment[:255]
	}
	return comment
}

func TestIPTablesNamesAndCommentsAreTheOnesInTheCaptures(t *testing.T) {
	for _, tc := range []struct {
		capture, network string
		ids              []string
	}{
		{"dual-nat-ipv4.txt", "nomad", []string{"alloc-1", "alloc-10"}},
		{"dual-nat-ipv6.txt", "nomad", []string{"alloc-1", "alloc-10"}},
		{"dotname-nat-ipv4.txt", "my.net", []string{"alloc-1", "alloc-10"}},
		{"longname-nat-ipv4.txt", strings.Repeat("n", 120), []string{strings.Repeat("a", 119) + "1", strings.Repeat("a", 119) + "10"}},
		{"toolong-nat-ipv4.txt", strings.Repeat("n", 124), []string{strings.Repeat("a", 120) + "1", strings.Repeat("a", 120) + "10"}},
	} {
		t.Run(tc.capture, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("../../testdata/iptables", tc.capture))
			if err != nil {
				t.Fatal(err)
			}
			masq, dnat := map[string]footprint.Attachment{}, map[string]footprint.Attachment{}
			var wantChains []string
			for _, id := range tc.ids {
				a := footprint.Attachment{Network: tc.network, ID: id}
				masq[a.MasqChain()], dnat[a.DNATChain()] = a, a
				wantChains = append(wantChains, a.MasqChain(), a.DNATChain())
			}
			var chains []string
			var masqComments, dnatComments int
			for _, line := range strings.Split(string(raw), "\n") {
				f := strings.Fields(line)
				if len(f) < 2 {
					continue
				}
				if f[0] == "-N" && strings.HasPrefix(f[1], "CNI-") && !strings.HasPrefix(f[1], "CNI-HOSTPORT-") {
					chains = append(chains, f[1])
				}
				if f[0] != "-A" {
					continue
				}
				comment, hasComment := iptablesComment(line)
				// a masquerade chain's own rules, and the jumps to it
				a, isMasq := masq[f[1]]
				if j, ok := masq[iptablesJump(line)]; ok && f[1] == "POSTROUTING" {
					a, isMasq = j, true
				}
				if isMasq {
					masqComments++
					if want := stored(a.MasqComment()); !hasComment || comment != want {
						t.Errorf("%s: comment %q, want %q", line, comment, want)
					}
				}
				if a, ok := dnat[iptablesJump(line)]; ok {
					dnatComments++
					if f[1] != "CNI-HOSTPORT-DNAT" {
						t.Errorf("%s: a jump to %s outside CNI-HOSTPORT-DNAT", line, a.DNATChain())
					}
					if want := stored(a.DNATComment()); !hasComment || comment != want {
						t.Errorf("%s: comment %q, want %q", line, comment, want)
					}
				}
			}
			sort.Strings(chains)
			sort.Strings(wantChains)
			if !slices.Equal(chains, wantChains) {
				t.Errorf("per-attachment chains %q, want %q", chains, wantChains)
			}
			// per attachment: one jump and two rules in its chain; two DNAT jumps (tcp, udp)
			if masqComments != 3*len(tc.ids) || dnatComments != 2*len(tc.ids) {
				t.Errorf("checked %d masquerade and %d DNAT comments, want %d and %d", masqComments, dnatComments, 3*len(tc.ids), 2*len(tc.ids))
			}
		})
	}
}

func TestTooLongCommentsAreCutAsTheCaptureShows(t *testing.T) {
	// testdata/iptables/README.md: portmap cuts a comment over 255 bytes to
	// 253 + "...", and iptables keeps 255 of those, so it is listed ending
	// in ".."; in toolong both attachments' comments are identical and only
	// the chains tell them apart.
	network := strings.Repeat("n", 124)
	a1 := footprint.Attachment{Network: network, ID: strings.Repeat("a", 120) + "1"}
	a10 := footprint.Attachment{Network: network, ID: strings.Repeat("a", 120) + "10"}
	for _, a := range []footprint.Attachment{a1, a10} {
		c := a.DNATComment()
		if len(c) != 256 || !strings.HasSuffix(c, "...") || c[:253] != fmt.Sprintf(`dnat name: "%s" id: "%s"`, a.Network, a.ID)[:253] {
			t.Errorf("DNATComment of a %d-byte id = %q (%d bytes), want the first 253 bytes and \"...\"", len(a.ID), c, len(c))
		}
		if s := stored(c); !strings.HasSuffix(s, "a..") || strings.HasSuffix(s, "...") {
			t.Errorf("stored DNAT comment ends %q, want \"a..\" as listed", s[len(s)-5:])
		}
	}
	if stored(a1.DNATComment()) != stored(a10.DNATComment()) || stored(a1.MasqComment()) != stored(a10.MasqComment()) {
		t.Error("the stored comments of the two toolong attachments differ; the capture shows them identical")
	}
	if a1.MasqChain() == a10.MasqChain() || a1.DNATChain() == a10.DNATChain() {
		t.Error("the two toolong attachments share a chain name")
	}
	raw, err := os.ReadFile("../../testdata/iptables/toolong-nat-ipv4.txt")
	if err != nil {
		t.Fatal(err)
	}
	listed := 0
	for _, line := range strings.Split(string(raw), "\n") {
		if strings.HasPrefix(line, "-A CNI-HOSTPORT-DNAT ") {
			listed++
			if c, _ := iptablesComment(line); c != stored(a1.DNATComment()) {
				t.Errorf("listed DNAT comment %q, want %q", c, stored(a1.DNATComment()))
			}
		}
	}
	if listed != 4 {
		t.Errorf("%d DNAT jumps in toolong-nat-ipv4.txt, want 4", listed)
	}
}
