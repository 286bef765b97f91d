package main

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// stringFields is what encoding/json reads into a struct of the string
// fields the shim reads (the config's and a CNI error's).
type stringFields struct {
	Name       string `json:"name"`
	CNIVersion string `json:"cniVersion"`
	Socket     string `json:"socket"`
	Timeout    string `json:"timeout"`
	Cninet     string `json:"cninet"`
	Msg        string `json:"msg"`
}

func readStringFields(data []byte) (stringFields, error) {
	members, err := readObject(data)
	if err != nil {
		return stringFields{}, err
	}
	var f stringFields
	for _, field := range []struct {
		name  string
		value *string
	}{{"name", &f.Name}, {"cniVersion", &f.CNIVersion}, {"socket", &f.Socket}, {"timeout", &f.Timeout}, {"cninet", &f.Cninet}, {"msg", &f.Msg}} {
		v, err := stringMember(members, field.name)
		if err != nil {
			return stringFields{}, err
		}
		*field.value = v
	}
	return f, nil
}

// FuzzReadConfig: the shim reads JSON as encoding/json reads it into a
// struct of string fields: the same verdict (valid or not) and, when
// valid, the same values.
func FuzzReadConfig(f *testing.F) {
	for _, seed := range []string{
		`{"cniVersion":"1.1.0","name":"web","type":"cninet-shim","socket":"/run/cninet/cninet.sock","timeout":"45s"}`,
		`{"name":"a","NAME":"b","Name":null,"nAmE":"c"}`,
		`{"name":"\ud83d\ude00 \ud800 \udc00x \u00e9\"\\\/\b\f\n\r\t"}`,
		"{\"name\":\"\xff\xfe\"}",
		`{"\u017focket":"/k","\u212aey":1}`,
		`{"runtimeConfig":{"portMappings":[{"hostPort":8080,"x":[1,-2.5e+3,true,false,null]}]},"name":"w"}`,
		`null`, `[]`, `"x"`, `5`, `{"name":5}`, `{"name":"x"} {}`, `{"name":"x",}`, `{"a":01}`, `{"a":1.}`, `{"a":-}`,
		"{\"a\":\"\x01\"}", `{"a":"\x"}`, `{"a":"\u12"}`, `{"a" 1}`, ` { } `, `{`, ``,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		got, err := readStringFields(data)
		var want stringFields
		werr := json.Unmarshal(data, &want)
		if (err == nil) != (werr == nil) {
			t.Fatalf("%q: the shim reads %+v, %v; encoding/json %+v, %v", data, got, err, want, werr)
		}
		if err == nil && got != want {
			t.Fatalf("%q: the shim reads %+v; encoding/json %+v", data, got, want)
		}
	})
}

// FuzzAppendString: a string is written as encoding/json writes it, and
// read back as encoding/json reads it.
func FuzzAppendString(f *testing.F) {
	for _, seed := range []string{"", "web", "a\"b\\c", "<&>", "\u2028\u2029", "\x00\x1f\x7f", "\xff", "é😀", "\b\f\n\r\t"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, s string) {
		want, _ := json.Marshal(s)
		got := appendString(nil, s)
		if string(got) != string(want) {
			t.Fatalf("%q written as %s, encoding/json writes %s", s, got, want)
		}
		if back := unquote(got); back != strings.ToValidUTF8(s, "\ufffd") && utf8.ValidString(s) {
			t.Fatalf("%q read back as %q", s, back)
		}
	})
}

func TestReadObjectRefusesWhatIsNoObject(t *testing.T) {
	for _, data := range []string{`[]`, `"x"`, `5`, `true`} {
		if _, err := readObject([]byte(data)); err != errNotObject {
			t.Errorf("%s: %v, want errNotObject", data, err)
		}
	}
	deep := strings.Repeat("[", maxJSONDepth+1) + strings.Repeat("]", maxJSONDepth+1)
	if _, err := readObject([]byte(deep)); err == nil || !strings.Contains(err.Error(), "depth") {
		t.Errorf("nesting past %d: %v, want an error", maxJSONDepth, err)
	}
}
