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

func TestCNIArgsCarry(t *testing.T) {
	for _, tt := range []struct {
		name  string
		alloc Allocation
		want  [][2]string
	}{
		{"a value containing '=' as it is, after cninet's IgnoreUnknown=1",
			Allocation{ID: "a", Args: map[string]string{"K8S_POD_UID": "a=b=c"}},
			[][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_UID", "a=b=c"}}},
		{"exact args without an IgnoreUnknown cninet would add",
			Allocation{ID: "a", ExactArgs: true, Args: map[string]string{"K8S_POD_NAME": "x"}},
			[][2]string{{"K8S_POD_NAME", "x"}}},
		{"exact args with the runtime's own IgnoreUnknown, its spelling and value kept",
			Allocation{ID: "a", ExactArgs: true, Args: map[string]string{"ignoreunknown": "true", "K8S_POD_NAME": "x"}},
			[][2]string{{"K8S_POD_NAME", "x"}, {"ignoreunknown", "true"}}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := cniArgs(&tt.alloc)
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("got %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestCNIArgsRejects(t *testing.T) {
	for name, args := range map[string]map[string]string{
		"an empty key":                                {"": "v"},
		"a key containing '='":                        {"A=B": "v"},
		"a key containing ';'":                        {"A;B": "v"},
		"a value containing ';'":                      {"A": "x;B=y"},
		"IgnoreUnknown, which is cninet's":            {"ignoreunknown": "0"},
		"a value containing ';' even with exact args": {"A": "x;B=y"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := cniArgs(&Allocation{ID: "a", Args: args}); !errors.Is(err, ErrInvalidAllocation) {
				t.Fatalf("err = %v, want ErrInvalidAllocation", err)
			}
		})
	}
}
