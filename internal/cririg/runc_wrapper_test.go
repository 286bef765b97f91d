package cririg

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The runc wrapper finds the bundle of the commands that take one, and
// edits nothing else.
func TestRuncWrapperBundleOf(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"create names its bundle with --bundle", []string{"--root", "/r", "create", "--bundle", "/b", "--pid-file", "/p", "id"}, "/b"},
		{"run names its bundle with -b", []string{"run", "-b", "/b", "id"}, "/b"},
		{"a bundle may be one argument with =", []string{"create", "--bundle=/b", "id"}, "/b"},
		{"state, kill and delete name no bundle", []string{"--root", "/r", "delete", "--force", "id"}, ""},
		{"a --bundle with no value names none", []string{"create", "--bundle"}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := BundleOf(tc.args); got != tc.want {
				t.Errorf("BundleOf(%q) = %q, want %q", tc.args, got, tc.want)
			}
		})
	}
}

// The wrapper drops linux.resources and process.oomScoreAdj from the
// bundle's config.json and keeps everything else exactly, large numbers
// included.
func TestRuncWrapperDropsUnsupportedLimits(t *testing.T) {
	bundle := t.TempDir()
	spec := `{"ociVersion":"1.0.2","process":{"args":["/pause"],"oomScoreAdj":-998,"user":{"uid":0,"gid":0}},` +
		`"linux":{"cgroupsPath":"/p/id","resources":{"cpu":{"shares":2}},"namespaces":[{"type":"network","path":"/var/run/netns/x"}]},` +
		`"annotations":{"big":"x"},"big":18446744073709551615}`
	if err := os.WriteFile(filepath.Join(bundle, "config.json"), []byte(spec), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := DropUnsupportedLimits([]string{"create", "--bundle", bundle, "id"}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(bundle, "config.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got, want map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatalf("the edited config.json is no JSON: %v: %s", err, b)
	}
	json.Unmarshal([]byte(`{"ociVersion":"1.0.2","process":{"args":["/pause"],"user":{"uid":0,"gid":0}},`+
		`"linux":{"cgroupsPath":"/p/id","namespaces":[{"type":"network","path":"/var/run/netns/x"}]},`+
		`"annotations":{"big":"x"},"big":18446744073709551615}`), &want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("edited config.json = %s, want resources and oomScoreAdj dropped and the rest kept", b)
	}
	if !strings.Contains(string(b), "18446744073709551615") {
		t.Errorf("a large number lost its digits: %s", b)
	}
	if err := DropUnsupportedLimits([]string{"create", "--bundle", filepath.Join(bundle, "missing"), "id"}); err == nil {
		t.Error("a bundle without config.json was accepted, want an error")
	}
}
