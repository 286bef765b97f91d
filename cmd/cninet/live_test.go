package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestLiveIDs(t *testing.T) {
	cases := []struct {
		name   string
		values []string
		want   []string
		err    string
	}{
		{"ids are separated by commas", []string{"a,b"}, []string{"a", "b"}, ""},
		{"white space around an id is trimmed", []string{" a , b\t"}, []string{"a", "b"}, ""},
		{"repeated --live values add up", []string{"a", "b,c"}, []string{"a", "b", "c"}, ""},
		{"an empty entry is an error", []string{"a,,b"}, nil, `empty id in "a,,b"`},
		{"a trailing comma is an empty entry", []string{"a,"}, nil, "empty id"},
		{"an empty value is an empty entry", []string{""}, nil, "empty id"},
		{"an id with a space inside is not a container id", []string{"a b"}, nil, `"a b" is not a valid container id`},
		{"an id starting with a dash is not a container id", []string{"-a"}, nil, "not a valid container id"},
		{"an id with a slash is not a container id", []string{"a/b"}, nil, "not a valid container id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseLive(tc.values)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %q, %v; want an error saying %q", got, err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}

func TestLiveFile(t *testing.T) {
	cases := []struct {
		name    string
		content string
		want    []string
		err     string
	}{
		{"one id a line, trimmed", "a\n  b  \n", []string{"a", "b"}, ""},
		{"blank lines and comments are skipped", "# live at 12:00\n\na\n   # indented comment\n\t\nb", []string{"a", "b"}, ""},
		{"a file of comments lists no id", "# none\n", nil, ""},
		{"an invalid id is an error naming its line", "a\nb c\n", nil, ":2: \"b c\" is not a valid container id"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "live")
			if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := readLiveFile(path)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("got %q, %v; want an error saying %q", got, err, tc.err)
				}
				return
			}
			if err != nil || !slices.Equal(got, tc.want) {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
