package nftables

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/seed1280861d/cninet/host"
)

// fakeNft writes an executable standing in for nft: it copies its
// stdin and arguments to files in dir, then runs body.
func fakeNft(t *testing.T, body string) (bin, dir string) {
	t.Helper()
	dir = t.TempDir()
	bin = filepath.Join(dir, "nft")
	sh := "#!/bin/sh\necho \"$@\" > " + dir + "/args\ncat > " + dir + "/stdin\n" + body + "\n"
	if err := os.WriteFile(bin, []byte(sh), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, dir
}

func TestRunScriptHandsNftTheScriptOnStdin(t *testing.T) {
	const script = "add table ip cni_hostport\nadd rule ip cni_hostport hostports tcp dport 28084 dnat to 198.18.1.2:80 comment \"web-1\"\n"
	for _, tc := range []struct {
		name    string
		body    string
		running bool     // ctx ends once nft has read its stdin
		ended   bool     // ctx ended before the call
		wantErr []string // what the error says; none: nil
		is      error
		ran     bool
	}{
		{name: "a script nft accepts", body: "exit 0", ran: true},
		{name: "a refused script's error carries what nft said", body: "echo 'Error: Could not process rule: No such file or directory' >&2; exit 1",
			wantErr: []string{"nft -f -", "exit status 1", "Could not process rule: No such file or directory"}, ran: true},
		{name: "nft still running when the context ends is killed", body: "touch " + "$(dirname $0)/read; exec sleep 30", running: true,
			wantErr: []string{"stopped"}, is: context.Canceled, ran: true},
		{name: "a context already ended starts nothing", body: "exit 0", ended: true, wantErr: []string{"not run"}, is: context.Canceled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			bin, dir := fakeNft(t, tc.body)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.ended {
				cancel()
			}
			if tc.running {
				go func() {
					for ctx.Err() == nil {
						if _, err := os.Stat(filepath.Join(dir, "read")); err == nil {
							cancel()
							return
						}
						time.Sleep(5 * time.Millisecond)
					}
				}()
			}
			err := (&hostNFTables{bin: bin}).RunScript(ctx, script)
			switch {
			case len(tc.wantErr) == 0 && err != nil:
				t.Fatalf("RunScript = %v, want nil", err)
			case len(tc.wantErr) > 0 && err == nil:
				t.Fatalf("RunScript = nil, want an error saying %q", tc.wantErr)
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("RunScript = %v, want it to say %q", err, s)
				}
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("RunScript = %v, want it to wrap %v", err, tc.is)
			}
			args, _ := os.ReadFile(filepath.Join(dir, "args"))
			stdin, _ := os.ReadFile(filepath.Join(dir, "stdin"))
			if ran := len(args) > 0; ran != tc.ran {
				t.Fatalf("nft ran: %v, want %v", ran, tc.ran)
			}
			if tc.ran && (strings.TrimSpace(string(args)) != "-f -" || string(stdin) != script) {
				t.Errorf("nft ran with %q and stdin %q; want -f - and the script whole", args, stdin)
			}
		})
	}
}

// A closed NFTables opens no copy of the rules: what it is asked after
// goes to the kernel, and nothing of it keeps listening to nf_tables.
func TestAClosedNFTablesOpensNoCopyOfTheRules(t *testing.T) {
	h := &hostNFTables{bin: "nft"}
	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	if m := h.rulesCopy(); m != nil {
		m.Close()
		t.Fatal("a closed NFTables opened a copy of the rules")
	}
}

// An Opener closes the default NFTables it opened, never one its Open
// returned: that one is its caller's.
func TestAnOpenerClosesOnlyTheDefaultItOpened(t *testing.T) {
	if _, err := exec.LookPath("nft"); err != nil {
		t.Fatalf("nft not on PATH (scripts/install-deps.sh installs it): %v", err)
	}
	var def Opener
	got, err := def.Get()
	if err != nil {
		t.Fatal(err)
	}
	if err := def.Close(); err != nil {
		t.Fatal(err)
	}
	if m := got.(*hostNFTables).rulesCopy(); m != nil {
		m.Close()
		t.Fatal("the default NFTables opened a copy of the rules after its Opener closed it")
	}

	theirs := &closeCounter{}
	given := Opener{Open: func() (host.NFTables, error) { return theirs, nil }}
	if _, err := given.Get(); err != nil {
		t.Fatal(err)
	}
	if err := given.Close(); err != nil || theirs.closed != 0 {
		t.Fatalf("Close = %v after closing the given NFTables %d times; want it left open", err, theirs.closed)
	}
}

type closeCounter struct {
	host.NFTables
	closed int
}

func (c *closeCounter) Close() error { c.closed++; return nil }
