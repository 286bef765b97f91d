package iptables

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestReadSaveStreamsTheLinesSaveToListingsWouldKeep(t *testing.T) {
	dump, err := os.ReadFile("../../testdata/iptables/bridge-dual.iptables-save")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		tables []string
	}{
		{"the tables cleanup reads", []string{"nat", "filter"}},
		{"one table, the others skipped", []string{"filter"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string][]string{}
			err := readSave(bytes.NewReader(dump), tc.tables, func(table string, line []byte) { got[table] = append(got[table], string(line)) })
			if err != nil {
				t.Fatal(err)
			}
			want := SaveToListings(string(dump))
			for table, lines := range want {
				if !slices.Contains(tc.tables, table) {
					if len(got[table]) > 0 {
						t.Errorf("table %s streamed, though not asked for", table)
					}
					continue
				}
				if len(lines) == 0 || !slices.Equal(got[table], lines) {
					t.Errorf("table %s: streamed %d lines, SaveToListings %d; first difference at %q", table, len(got[table]), len(lines), firstDifferent(got[table], lines))
				}
			}
		})
	}
}

func TestReadSaveRefusesALineLongerThanItsBound(t *testing.T) {
	long := "*nat\n-A POSTROUTING " + strings.Repeat("x", maxSaveLine) + "\nCOMMIT\n"
	if err := readSave(strings.NewReader(long), []string{"nat"}, func(string, []byte) {}); err == nil {
		t.Error("readSave accepted a line longer than maxSaveLine")
	}
}

func firstDifferent(a, b []string) string {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return a[i]
		}
	}
	return ""
}
