package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestVersionOf(t *testing.T) {
	tests := []struct {
		name string
		info debug.BuildInfo
		want string
	}{
		{"cninet's own binary says its main module's version",
			debug.BuildInfo{Main: debug.Module{Path: Module, Version: "v0.1.0"}}, "v0.1.0"},
		{"a build that recorded no version says (devel)",
			debug.BuildInfo{Main: debug.Module{Path: Module}}, devel},
		{"an importer's binary says the dependency's version",
			debug.BuildInfo{Main: debug.Module{Path: "example.com/orch", Version: "v9.9.9"},
				Deps: []*debug.Module{{Path: "other", Version: "v1.0.0"}, {Path: Module, Version: "v0.2.0"}}}, "v0.2.0"},
		{"a replaced dependency says the replacement's version",
			debug.BuildInfo{Main: debug.Module{Path: "example.com/orch"},
				Deps: []*debug.Module{{Path: Module, Version: "v0.2.0", Replace: &debug.Module{Path: "../cninet"}}}}, devel},
		{"a binary without cninet says (devel)",
			debug.BuildInfo{Main: debug.Module{Path: "example.com/orch", Version: "v1.0.0"}}, devel},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := versionOf(&tt.info); got != tt.want {
				t.Errorf("versionOf = %q, want %q", got, tt.want)
			}
		})
	}
	if Version() == "" {
		t.Error("Version() is empty")
	}
}
