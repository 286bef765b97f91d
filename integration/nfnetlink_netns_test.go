package integration

import (
	"os/exec"
	"runtime"
	"testing"

	"github.com/seed1280861d/cninet/internal/netsandbox"
	"github.com/seed1280861d/cninet/internal/nfnetlink"
	"golang.org/x/sys/unix"
)

// nf_tables questions reuse their netlink sockets, and a socket answers
// for the namespace it was opened in: a question asked from a thread in
// another namespace must never get a kept socket of this one (nor leave
// one of its own for this one's questions).
func TestNFNetlinkAnswersForTheAskingThreadsNamespace(t *testing.T) {
	netsandbox.Require(t)
	if out, err := exec.Command("nft", "add table ip cninet_nsprobe; add chain ip cninet_nsprobe c").CombinedOutput(); err != nil {
		t.Fatalf("nft: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("nft", "delete", "table", "ip", "cninet_nsprobe").Run() })
	ask := func() (bool, error) { return nfnetlink.ProbeChain("ip", "cninet_nsprobe", "c") }
	for i := range 3 { // the sockets of these are kept
		if ok, err := ask(); err != nil || !ok {
			t.Fatalf("probe %d here: %v, %v; want the chain found", i, ok, err)
		}
	}
	type answer struct {
		ok  bool
		err error
	}
	elsewhere := make(chan []answer)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread, moved to another namespace, ends with the goroutine
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			elsewhere <- []answer{{err: err}}
			return
		}
		var got []answer
		for range 3 {
			ok, err := ask()
			got = append(got, answer{ok, err})
		}
		elsewhere <- got
	}()
	for i, a := range <-elsewhere {
		if a.err != nil || a.ok {
			t.Errorf("probe %d from a fresh namespace: %v, %v; want no such chain there", i, a.ok, a.err)
		}
	}
	for i := range 3 {
		if ok, err := ask(); err != nil || !ok {
			t.Errorf("probe %d here again: %v, %v; want the chain found", i, ok, err)
		}
	}
}
