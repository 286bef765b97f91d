package footprint

import (
	"net/netip"
	"slices"
	"testing"
)

func TestReservedNamesEachAddressWithTheAttachmentItIsReservedFor(t *testing.T) {
	a, b := Attachment{"net", "a"}, Attachment{"net", "b"}
	files := hostFiles{reservations: []reservation{
		{net: "net", id: "a", addr: netip.MustParseAddr("198.18.0.2")},
		{net: "net", id: "b", addr: netip.MustParseAddr("198.18.0.3")},
	}}
	reserved := files.reserved()
	tests := []struct {
		name string
		att  Attachment
		addr string
		want bool
	}{
		{"an address reserved for the attachment is reserved", a, "198.18.0.2", true},
		{"an address reserved for another attachment is not the attachment's", a, "198.18.0.3", false},
		{"an address nobody reserved is nobody's", b, "198.18.0.4", false},
		{"the same address on another network is not reserved there", Attachment{"other", "a"}, "198.18.0.2", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := reserved[reservedAddr{tt.att, netip.MustParseAddr(tt.addr)}]; got != tt.want {
				t.Errorf("reserved(%v, %s) = %v, want %v", tt.att, tt.addr, got, tt.want)
			}
		})
	}
}

func TestWithheldPlansEachRecordOfTheSetOnce(t *testing.T) {
	a, b, live := Attachment{"net", "a"}, Attachment{"net", "b"}, Attachment{"net", "live"}
	rec := func(att Attachment) intentRecord {
		return intentRecord{net: att.Network, id: att.ID, path: "/records/" + att.ID}
	}
	v := &view{
		prior: hostFiles{records: []intentRecord{rec(a), rec(b), rec(live)}},
		files: hostFiles{records: []intentRecord{rec(a), rec(b)}},
	}
	p := &plan{records: []fileChange{{kind: KindIntentRecord, att: b, path: "/records/b"}}}
	withheld{}.plan(v, attSet{a: true, b: true}, nil, p)
	var paths []string
	for _, c := range p.records {
		paths = append(paths, c.path)
	}
	if want := []string{"/records/b", "/records/a"}; !slices.Equal(paths, want) {
		t.Errorf("planned records %q, want %q: each of the set's once, none of another attachment", paths, want)
	}
}
