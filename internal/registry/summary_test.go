package registry

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/internal/identity"
)

// summaryCases are record files, by what they hold, that the summary
// decoding must judge as the full one does; the file is c1/net1/eth1.
func summaryCases(t testing.TB) []struct{ name, raw string } {
	r := full("c1", "net1", "eth1")
	r.Version = FormatVersion
	valid, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	// with is the valid record with its conflist's value replaced.
	with := func(field, value string) string {
		return strings.Replace(string(valid), `"confList":`, fmt.Sprintf(`%s:%s,"confList":`, field, value), 1)
	}
	conf := func(value string) string {
		var m map[string]json.RawMessage
		if err := json.Unmarshal(valid, &m); err != nil {
			t.Fatal(err)
		}
		m["confList"] = json.RawMessage(value)
		raw, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		return string(raw)
	}
	base := `"version":1,"network":"net1","containerID":"c1","ifName":"eth1"`
	return []struct{ name, raw string }{
		{"a whole record", string(valid)},
		{"a record of only its version and key", "{" + base + "}"},
		{"a record with a field no version has", "{" + base + `,"future":{"x":[1]}}`},
		{"a conflist of null", conf(`null`)},
		{"an empty conflist", conf(`""`)},
		{"a conflist as an array of bytes", conf(`[123,125]`)},
		{"a conflist in base64 with escapes", conf(`"\u0065w=="`)},
		{"a conflist in base64 with an escaped line break", conf(`"ew==\n"`)},
		{"a conflist in base64 without its padding", conf(`"QQ"`)},
		{"a conflist in base64 with too much padding", conf(`"Q==="`)},
		{"a conflist in base64 with padding inside", conf(`"QQ==QQ=="`)},
		{"a conflist of characters base64 has not", conf(`"!!!!"`)},
		{"a conflist of characters beyond ASCII", conf(`"ewé="`)},
		{"a conflist that is a number", conf(`5`)},
		{"a conflist that is an object", conf(`{}`)},
		{"a conflist that is true", conf(`true`)},
		{"a conflist array holding a string", conf(`["a"]`)},
		{"a conflist array holding a number beyond a byte", conf(`[256]`)},
		{"a conflist named in capitals", strings.Replace(conf(`"!!!!"`), `"confList"`, `"CONFLIST"`, 1)},
		{"a bad conflist then a good one under the same name", "{" + base + `,"confList":"!!!!","confList":"ew=="}`},
		{"a good conflist then a bad one under the same name", "{" + base + `,"confList":"ew==","confList":"!!!!"}`},
		{"args of the wrong shape", with(`"args"`, `[["a",1]]`)},
		{"args of three strings", with(`"args"`, `[["a","b","c"]]`)},
		{"plugins of the wrong shape", with(`"plugins"`, `[{"type":1}]`)},
		{"an address that is none", "{" + base + `,"addresses":["nope"]}`},
		{"a since that is no time", "{" + base + `,"since":"yesterday"}`},
		{"capabilities that are no object", "{" + base + `,"capabilities":[1]}`},
		{"a record of a later version with a bad conflist", `{"version":2,"network":"net1","containerID":"c1","ifName":"eth1","confList":"!!!!"}`},
		{"a record of a later version", `{"version":2,"network":"net1","containerID":"c1","ifName":"eth1"}`},
		{"a record of version 0", `{"version":0,"network":"net1","containerID":"c1","ifName":"eth1"}`},
		{"a record naming another key than its path", strings.Replace(string(valid), `"eth1"`, `"eth7"`, 1)},
		{"garbage bytes", "\x00\xff\xfeGARBAGE\n"},
		{"an empty file", ""},
		{"truncated JSON", string(valid[:len(valid)/2])},
		{"JSON that is not an object", `[1,2,3]`},
		{"JSON null", `null`},
	}
}

// verdict is how a decoding judged a file: usable, or the kind of damage
// (what its error says before the first colon).
func verdict(err error) string {
	if err == nil {
		return "usable"
	}
	kind, _, _ := strings.Cut(err.Error(), ":")
	return kind
}

// checkSummaryAgrees decodes raw both ways and fails unless the summary
// is the full record's, or both refuse it alike.
func checkSummaryAgrees(t *testing.T, raw []byte) {
	t.Helper()
	k := identity.Key{Network: "net1", ID: "c1", IfName: "eth1"}
	rec, recErr := decodeRecord(raw, "p", k)
	sum, sumErr := decodeSummary(raw, "p", k)
	if verdict(recErr) != verdict(sumErr) {
		t.Fatalf("decoded whole: %v; as a summary: %v; want the same verdict", recErr, sumErr)
	}
	if recErr == nil && !reflect.DeepEqual(sum, rec.Summary()) {
		t.Fatalf("summary %+v, want the record's %+v", sum, rec.Summary())
	}
}

func TestSummaryDecodingJudgesAsTheRecordsDoes(t *testing.T) {
	for _, c := range summaryCases(t) {
		t.Run(c.name, func(t *testing.T) { checkSummaryAgrees(t, []byte(c.raw)) })
	}
}

func FuzzSummaryDecodingJudgesAsTheRecordsDoes(f *testing.F) {
	for _, c := range summaryCases(f) {
		f.Add([]byte(c.raw))
	}
	f.Fuzz(checkSummaryAgrees)
}

// jsonFields maps the JSON names of t's fields, those of embedded structs
// too, to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			for name, typ := range jsonFields(f.Type) {
				out[name] = typ
			}
			continue
		}
		if name, _, _ := strings.Cut(f.Tag.Get("json"), ","); f.IsExported() {
			out[name] = f.Type
		}
	}
	return out
}

// A field added to Record and not to the summary decoding would go
// unchecked by Summaries: a record All refuses would be listed.
func TestSummaryDecodingHasEveryFieldOfARecord(t *testing.T) {
	record, decoded, summary := jsonFields(reflect.TypeFor[Record]()), jsonFields(reflect.TypeFor[summaryJSON]()), jsonFields(reflect.TypeFor[Summary]())
	for name, typ := range record {
		want := typ
		switch name {
		case "confList":
			want = reflect.TypeFor[base64Only]()
		case "result":
			want = reflect.TypeFor[jsonOnly]()
		}
		if decoded[name] != want {
			t.Errorf("field %q: the summary decoding has it as %v, want %v", name, decoded[name], want)
		}
		if s, ok := summary[name]; ok && s != typ {
			t.Errorf("field %q: Summary has it as %v, Record as %v", name, s, typ)
		}
	}
	if len(decoded) != len(record) {
		t.Errorf("the summary decoding has fields %v, want Record's %v", decoded, record)
	}
}

func TestSummariesListWhatAllReads(t *testing.T) {
	g := open(t)
	for _, k := range []identity.Key{{Network: "net1", ID: "c1", IfName: "eth0"}, {Network: "net2", ID: "c1", IfName: "eth0"}, {Network: "net1", ID: "c2", IfName: "eth0"}, {Network: "net1", ID: "c2", IfName: "eth1"}} {
		mustPut(t, g, full(k.ID, k.Network, k.IfName))
	}
	for _, c := range summaryCases(t) {
		// Each case as a file of its own id, whose key it must name.
		id := fmt.Sprintf("d%02d", len(c.name))
		raw := strings.ReplaceAll(c.raw, `"c1"`, `"`+id+`"`)
		path := filepath.Join(g.Dir(), "attachments", id, "net1", "eth1")
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(raw), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(g.Dir(), "attachments", "stray"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	all, err := g.All()
	if err != nil {
		t.Fatal(err)
	}
	sums, err := g.Summaries()
	if err != nil {
		t.Fatal(err)
	}
	want := make([]Summary, 0, len(all.Records))
	for _, r := range all.Records {
		want = append(want, r.Summary())
	}
	if !reflect.DeepEqual(sums.Summaries, want) {
		t.Errorf("Summaries:\n%+v\nwant All's records':\n%+v", sums.Summaries, want)
	}
	if len(all.Damaged) < 2 || len(sums.Damaged) != len(all.Damaged) {
		t.Fatalf("Summaries reports %d damaged files, All %d: want the same, several", len(sums.Damaged), len(all.Damaged))
	}
	for i, d := range sums.Damaged {
		if a := all.Damaged[i]; d.Path != a.Path || d.ID != a.ID || verdict(d.Err) != verdict(a.Err) {
			t.Errorf("Summaries reports %v, All %v", d, a)
		}
	}
}

// listedConfList is a conflist the size of the default bridge one.
const listedConfList = `{
  "cniVersion": "1.0.0",
  "name": "web",
  "plugins": [
    {
      "type": "loopback"
    },
    {
      "type": "bridge",
      "bridge": "webbr0",
      "ipMasq": true,
      "isGateway": true,
      "forceAddress": true,
      "hairpinMode": false,
      "ipam": {
        "type": "host-local",
        "ranges": [
          [
            {
              "subnet": "10.100.0.0/16"
            }
          ]
        ],
        "routes": [
          {
            "dst": "0.0.0.0/0"
          }
        ],
        "dataDir": "/var/run/cni"
      }
    },
    {
      "type": "firewall",
      "backend": "iptables",
      "iptablesAdminChainName": "WEB-ADMIN"
    },
    {
      "type": "portmap",
      "capabilities": {
        "portMappings": true
      },
      "snat": true
    }
  ]
}
`

// writeListedRecords writes n records straight to g's files (as Put
// would, without its fsyncs), one id each, as Setup records an attached
// workload with two addresses, CNI args, two port mappings and the
// conflist above: about 1.8 KB a record, as on a host.
func writeListedRecords(b *testing.B, g *Registry, n int) {
	b.Helper()
	since := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := range n {
		id := fmt.Sprintf("alloc-%05d-%08x", i, uint32(i)*2654435761)
		r := &Record{Version: FormatVersion, Owner: "nomad", Key: identity.Key{Network: "web", ID: id, IfName: "eth0"},
			NetNS: "/var/run/netns/" + id, State: Attached,
			Addresses: []netip.Addr{netip.AddrFrom4([4]byte{10, 100, byte(i / 250), byte(2 + i%250)}), netip.MustParseAddr(fmt.Sprintf("fd00:100::%x", 2+i))},
			Args:      [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"NOMAD_ALLOC_ID", id}},
			Capabilities: map[string]json.RawMessage{"portMappings": json.RawMessage(fmt.Sprintf(
				`[{"HostPort":%d,"ContainerPort":8080,"Protocol":"tcp","HostIP":""},{"HostPort":%[1]d,"ContainerPort":8080,"Protocol":"udp","HostIP":""}]`, 20000+i%40000))},
			ConfList: []byte(listedConfList),
			Plugins:  []Plugin{{Type: "loopback"}, {Type: "bridge", Backend: "iptables"}, {Type: "firewall", Backend: "iptables"}, {Type: "portmap", Backend: "iptables"}},
			Since:    since.Add(time.Duration(i) * time.Second), Updated: since.Add(time.Duration(i) * time.Second),
		}
		raw, err := json.Marshal(r)
		if err != nil {
			b.Fatal(err)
		}
		path := g.path(r.Key)
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			b.Fatal(err)
		}
		if err := os.WriteFile(path, raw, 0o600); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkListing10000 lists a host registry of 10,000 records as
// `cninet status --attachments` does (Summaries), and whole (All), side
// by side.
func BenchmarkListing10000(b *testing.B) {
	const n = 10_000
	g := open(b)
	writeListedRecords(b, g, n)
	for _, c := range []struct {
		name string
		list func() (int, int, error)
	}{
		{"Summaries", func() (int, int, error) { l, err := g.Summaries(); return len(l.Summaries), len(l.Damaged), err }},
		{"All", func() (int, int, error) { l, err := g.All(); return len(l.Records), len(l.Damaged), err }},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if listed, damaged, err := c.list(); listed != n || damaged != 0 || err != nil {
					b.Fatalf("%d listed, %d damaged, %v; want %d, none", listed, damaged, err, n)
				}
			}
		})
	}
}
