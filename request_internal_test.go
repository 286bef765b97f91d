package cninet

import (
	"errors"
	"reflect"
	"testing"
)

func TestCNIArgsAreIgnoreUnknownThenSortedUserArgs(t *testing.T) {
	alloc := &Allocation{ID: "a", Args: map[string]string{"NOMAD_JOB_ID": "web", "NOMAD_ALLOC_ID": "a", "K8S_POD_NAME": "x"}}
	want := [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAME", "x"}, {"NOMAD_ALLOC_ID", "a"}, {"NOMAD_JOB_ID", "web"}}
	for i := 0; i < 20; i++ { // map iteration order varies; the args must not
		got, err := cniArgs(alloc)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
}

func TestCNIArgsRejects(t *testing.T) {
	for name, args := range map[string]map[string]string{
		"an empty key":                     {"": "v"},
		"a key containing '='":             {"A=B": "v"},
		"a key containing ';'":             {"A;B": "v"},
		"a value containing '='":           {"A": "x=y"},
		"a value containing ';'":           {"A": "x;B=y"},
		"IgnoreUnknown, which is cninet's": {"ignoreunknown": "0"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := cniArgs(&Allocation{ID: "a", Args: args}); !errors.Is(err, ErrInvalidAllocation) {
				t.Fatalf("err = %v, want ErrInvalidAllocation", err)
			}
		})
	}
}
