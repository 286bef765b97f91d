package registry

import (
	"encoding/base64"
	"encoding/json"
	"github.com/seed1280861d/cninet/internal/identity"
	"net/netip"
	"slices"
	"sync"
	"time"
	"unicode/utf8"
)

// Summary is what a listing shows of a record: whose attachment it is,
// its key, namespace, state, addresses, capability args (port mappings)
// and since when. It leaves out what only a DEL and its cleanup need
// (args, the conflist, the plugins).
type Summary struct {
	Version int    `json:"version"`
	Owner   string `json:"owner"`
	identity.Key
	RuntimeID    string                     `json:"runtimeID,omitempty"`
	NetNS        string                     `json:"netns,omitempty"`
	State        State                      `json:"state"`
	Addresses    []netip.Addr               `json:"addresses,omitempty"`
	Capabilities map[string]json.RawMessage `json:"capabilities,omitempty"`
	Since        time.Time                  `json:"since"`
	Updated      time.Time                  `json:"updated"`

	path string // where it was read from
}

// Summary is what a listing shows of r.
func (r Record) Summary() Summary {
	return Summary{Version: r.Version, Owner: r.Owner, Key: r.Key,
		RuntimeID: r.RuntimeID, NetNS: r.NetNS, State: r.State, Addresses: r.Addresses, Capabilities: r.Capabilities,
		Since: r.Since, Updated: r.Updated, path: r.path}
}

// Path is the file the record was read from.
func (s Summary) Path() string { return s.path }

// Summaries is every record of the registry as a listing shows it, and
// every file in it that is no usable record.
type Summaries struct {
	Summaries []Summary
	Damaged   []Damaged
}

// Summaries reads every record as a listing shows it, sorted by id,
// network and interface: the records and the damaged files All reads,
// at less cost. A file that is no usable record is in Damaged; an error
// says a directory could not be read.
func (g *Registry) Summaries() (Summaries, error) {
	sums, damaged, err := readAll(g, decoding(decodeSummary))
	return Summaries{Summaries: sums, Damaged: damaged}, err
}

// summaryJSON is a record's JSON as Summaries decodes it: every field of
// Record, so that it refuses exactly the records All refuses, those a
// listing leaves out checked but not kept.
type summaryJSON struct {
	Summary
	NetNSInode uint64      `json:"netnsInode,omitempty"`
	ViaCNI     bool        `json:"viaCNI,omitempty"`
	CacheDir   string      `json:"cacheDir,omitempty"`
	Boot       string      `json:"boot,omitempty"`
	Args       [][2]string `json:"args,omitempty"`
	ConfList   base64Only  `json:"confList,omitempty"`
	Result     jsonOnly    `json:"result,omitempty"`
	Plugins    []Plugin    `json:"plugins,omitempty"`
}

// jsonOnly accepts what a json.RawMessage field accepts (any JSON value,
// which encoding/json checked before it decodes any of the document) and
// keeps nothing: the ADD's result is for a drift check, not a listing.
type jsonOnly struct{}

func (*jsonOnly) UnmarshalJSON([]byte) error { return nil }

// decodeSummary decodes one record's summary (a decoder).
func decodeSummary(raw []byte, path string, k identity.Key) (Summary, error) {
	var r summaryJSON
	if err := checkDecoded(raw, json.Unmarshal(raw, &r), r.Version, r.Key, k); err != nil {
		return Summary{}, err
	}
	r.path = path
	return r.Summary, nil
}

// base64Only accepts what a []byte field accepts, and keeps nothing: the
// conflist, about half of a record's bytes, is checked, not copied.
type base64Only struct{}

// UnmarshalJSON checks raw as encoding/json checks a []byte: a plain
// string by the same base64 decoding into a reused buffer; anything else
// (null, an array of bytes, a string with escapes, what a []byte
// refuses) by encoding/json itself.
func (*base64Only) UnmarshalJSON(raw []byte) error {
	s, ok := plainString(raw)
	if !ok {
		var b []byte
		return json.Unmarshal(raw, &b)
	}
	buf := decodeBuffers.Get().(*[]byte)
	defer decodeBuffers.Put(buf)
	*buf = slices.Grow((*buf)[:0], base64.StdEncoding.DecodedLen(len(s)))
	_, err := base64.StdEncoding.Decode((*buf)[:cap(*buf)], s)
	return err
}

// decodeBuffers are the buffers base64Only decodes into.
var decodeBuffers = sync.Pool{New: func() any { return new([]byte) }}

// plainString returns what the JSON string literal raw holds when that
// is raw's bytes between its quotes: ASCII, no escapes. raw is valid JSON
// (encoding/json checks a document before it decodes any of it).
func plainString(raw []byte) ([]byte, bool) {
	if len(raw) < 2 || raw[0] != '"' {
		return nil, false
	}
	s := raw[1 : len(raw)-1]
	for _, c := range s {
		if c == '\\' || c >= utf8.RuneSelf {
			return nil, false
		}
	}
	return s, true
}
