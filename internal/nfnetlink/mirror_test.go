package nfnetlink

import (
	"errors"
	"fmt"
	"slices"
	"syscall"
	"testing"
	"time"
)

// queue is a subscription's receive queue as a test fills it: next
// answers EAGAIN when it is empty, as a socket read without waiting does.
type queue struct {
	items  []received
	closed bool
}

func (q *queue) next() ([]byte, bool, error) {
	if len(q.items) == 0 {
		return nil, false, syscall.EAGAIN
	}
	r := q.items[0]
	q.items = q.items[1:]
	return r.datagram, r.truncated, r.err
}

func (q *queue) close() { q.closed = true }

// mirrorHost is a fake kernel of one ip table whose changes queue the
// notifications nf_tables would send, unless told to lose them.
type mirrorHost struct {
	k      *fakeKernel
	q      *queue
	handle uint64
}

func newMirrorHost() *mirrorHost {
	return &mirrorHost{k: &fakeKernel{table: "cni_hostport", chains: map[string][]fakeRule{
		"hostports":    {{handle: 1, comment: "id-a", raw: []byte("dnat a")}, {handle: 2, comment: "id-b", raw: []byte("dnat b")}},
		"masquerading": {{handle: 3, comment: "id-a", raw: []byte("masq a")}},
	}}, q: &queue{}, handle: 3}
}

func ruleNotification(typ uint16, table, chain string, r fakeRule) received {
	return received{datagram: nlMsg(nfnlSubsysNFTables<<8|typ, 0, 0, fakeRulePayload(table, chain, r))}
}

// add appends a rule to chain and, when notify, queues its notification.
func (h *mirrorHost) add(chain, comment string, notify bool) fakeRule {
	h.handle++
	r := fakeRule{handle: h.handle, comment: comment, raw: fmt.Appendf(nil, "rule %d", h.handle)}
	h.k.chains[chain] = append(h.k.chains[chain], r)
	if notify {
		h.q.items = append(h.q.items, ruleNotification(nftMsgNewRule, h.k.table, chain, r))
	}
	return r
}

// del deletes the rule with handle from chain and queues its
// notification.
func (h *mirrorHost) del(chain string, handle uint64) {
	rules := h.k.chains[chain]
	i := slices.IndexFunc(rules, func(r fakeRule) bool { return r.handle == handle })
	h.q.items = append(h.q.items, ruleNotification(nftMsgDelRule, h.k.table, chain, rules[i]))
	h.k.chains[chain] = slices.Delete(rules, i, i+1)
}

// fromKernel is what a search of the fake kernel's chains finds.
func (h *mirrorHost) fromKernel(t *testing.T, comments map[string]bool) []string {
	t.Helper()
	var out []string
	for _, chain := range []string{"hostports", "masquerading"} {
		rules, err := findRules(h.k, "ip", h.k.table, chain, comments)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, describe(rules)...)
	}
	return out
}

func describe(rules []Rule) []string {
	var out []string
	for _, r := range rules {
		out = append(out, fmt.Sprintf("%s %s %s %d %q %q", r.Family, r.Table, r.Chain, r.Handle, r.Comment, r.Expr))
	}
	return out
}

func TestAMirrorAnswersWhatTheKernelHoldsAfterEveryChange(t *testing.T) {
	chains := []Chain{{"ip", "cni_hostport", "hostports"}, {"ip", "cni_hostport", "masquerading"}}
	comments := map[string]bool{"id-a": true, "id-c": true}
	for _, tc := range []struct {
		name   string
		change func(h *mirrorHost)
		dumps  int // the copy's reads of the table in all, the first question's included
	}{
		{"nothing changed: the second question reads nothing of the kernel", func(*mirrorHost) {}, 1},
		{"a rule added is found from its notification", func(h *mirrorHost) { h.add("hostports", "id-c", true) }, 1},
		{"a rule deleted is gone from its notification", func(h *mirrorHost) { h.del("hostports", 1) }, 1},
		{"a rule with another comment changes nothing found", func(h *mirrorHost) { h.add("masquerading", "id-z", true) }, 1},
		{"a rule of another table is not followed", func(h *mirrorHost) {
			h.q.items = append(h.q.items, ruleNotification(nftMsgNewRule, "nat", "hostports", fakeRule{handle: 1, comment: "id-a", raw: []byte("x")}))
		}, 1},
		{"a chain deleted takes its rules", func(h *mirrorHost) {
			handle := h.k.chainHandle("masquerading")
			delete(h.k.chains, "masquerading")
			h.q.items = append(h.q.items, received{datagram: nlMsg(nfnlSubsysNFTables<<8|nftMsgDelChain, 0, 0,
				fakeChainPayload("cni_hostport", "masquerading", handle))})
		}, 1},
		{"a chain added again, as every ADD of portmap does, changes nothing", func(h *mirrorHost) {
			h.q.items = append(h.q.items, received{datagram: nlMsg(nfnlSubsysNFTables<<8|nftMsgNewChain, 0, 0,
				fakeChainPayload("cni_hostport", "hostports", h.k.chainHandle("hostports")))})
		}, 1},
		{"a chain it did not know makes it read the table again: it may be one renamed", func(h *mirrorHost) {
			h.k.chains["new"] = nil
			h.q.items = append(h.q.items, received{datagram: nlMsg(nfnlSubsysNFTables<<8|nftMsgNewChain, 0, 0,
				fakeChainPayload("cni_hostport", "new", 7777))})
		}, 2},
		{"a chain renamed makes it read the table again: its rules moved without a notification", func(h *mirrorHost) {
			handle := h.k.chainHandle("masquerading")
			h.k.chains["masquerading-renamed"] = h.k.chains["masquerading"]
			delete(h.k.chains, "masquerading")
			h.q.items = append(h.q.items, received{datagram: nlMsg(nfnlSubsysNFTables<<8|nftMsgNewChain, 0, 0,
				fakeChainPayload("cni_hostport", "masquerading-renamed", handle))})
		}, 2},
		{"a table deleted and made again: its old rules gone, the new ones with the same handles found", func(h *mirrorHost) {
			h.k.chains = map[string][]fakeRule{}
			h.q.items = append(h.q.items, received{datagram: nlMsg(nfnlSubsysNFTables<<8|nftMsgDelTable, 0, 0,
				cat([]byte{2, 0, 0, 0}, attr(nftaTableName, strz("cni_hostport"))))})
			h.handle = 0
			h.add("hostports", "id-c", true)
			h.add("hostports", "id-a", true)
		}, 1},
		{"a rule added and deleted between two questions is not found", func(h *mirrorHost) {
			r := h.add("hostports", "id-a", true)
			h.del("hostports", r.handle)
		}, 1},
		{"an overrun (ENOBUFS) makes it read the table again, and what was lost is found", func(h *mirrorHost) {
			h.add("hostports", "id-a", false)
			h.q.items = append(h.q.items, received{err: syscall.ENOBUFS})
			h.add("hostports", "id-c", true)
		}, 2},
		{"a datagram cut short makes it read the table again", func(h *mirrorHost) {
			r := h.add("hostports", "id-c", false)
			h.q.items = append(h.q.items, received{datagram: ruleNotification(nftMsgNewRule, h.k.table, "hostports", r).datagram[:20], truncated: true})
			h.add("hostports", "id-a", true)
		}, 2},
		{"a datagram that does not parse in place of a deletion makes it read the table again", func(h *mirrorHost) {
			h.del("hostports", 2)
			garbage := make([]byte, 20)
			garbage[0] = 100 // a message longer than the datagram
			h.q.items[len(h.q.items)-1] = received{datagram: garbage}
		}, 2},
		{"a rule notification without a handle makes it read the table again", func(h *mirrorHost) {
			h.q.items = append(h.q.items, ruleNotification(nftMsgNewRule, h.k.table, "hostports", fakeRule{comment: "id-a"}))
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newMirrorHost()
			m := newMirror(h.q, h.k)
			if _, err := m.Find(chains, comments); err != nil {
				t.Fatal(err)
			}
			tc.change(h)
			got, err := m.Find(chains, comments)
			if err != nil {
				t.Fatal(err)
			}
			if want := h.fromKernel(t, comments); !slices.Equal(describe(got), want) {
				t.Errorf("the copy found\n  %q\nthe kernel holds\n  %q", describe(got), want)
			}
			if n := m.Reloads(); n != tc.dumps {
				t.Errorf("the copy read the table %d times, want %d", n, tc.dumps)
			}
			if len(h.q.items) != 0 {
				t.Errorf("%d notifications left unread", len(h.q.items))
			}
		})
	}
}

// Notifications read after the dumps that describe changes the dumps
// already hold (queued while the table was read) change nothing.
func TestAMirrorAppliesNotificationsOfChangesItsDumpAlreadyHeld(t *testing.T) {
	h := newMirrorHost()
	h.k.afterDump = func(k *fakeKernel) {
		if k.dumps > 1 {
			return
		}
		// Before the dump: handle 2 was deleted, handle 9 added and
		// handle 10 added and deleted again.
		h.q.items = append(h.q.items,
			ruleNotification(nftMsgDelRule, k.table, "hostports", fakeRule{handle: 2, comment: "id-b"}),
			ruleNotification(nftMsgNewRule, k.table, "hostports", fakeRule{handle: 9, comment: "id-a", raw: []byte("rule 9")}),
			ruleNotification(nftMsgNewRule, k.table, "masquerading", fakeRule{handle: 10, comment: "id-a", raw: []byte("rule 10")}),
			ruleNotification(nftMsgDelRule, k.table, "masquerading", fakeRule{handle: 10, comment: "id-a", raw: []byte("rule 10")}))
	}
	h.k.chains["hostports"] = []fakeRule{h.k.chains["hostports"][0], {handle: 9, comment: "id-a", raw: []byte("rule 9")}}
	m := newMirror(h.q, h.k)
	chains := []Chain{{"ip", "cni_hostport", "hostports"}, {"ip", "cni_hostport", "masquerading"}}
	comments := map[string]bool{"id-a": true, "id-b": true}
	for range 2 {
		got, err := m.Find(chains, comments)
		if err != nil {
			t.Fatal(err)
		}
		if want := h.fromKernel(t, comments); !slices.Equal(describe(got), want) {
			t.Errorf("the copy found\n  %q\nthe kernel holds\n  %q", describe(got), want)
		}
	}
	if n := m.Reloads(); n != 1 {
		t.Errorf("the copy read the table %d times, want 1", n)
	}
}

func TestAMirrorThatCannotAnswerSaysSo(t *testing.T) {
	chains := []Chain{{"ip", "cni_hostport", "hostports"}}
	t.Run("a dump that fails fails the question, and the next reads the table again", func(t *testing.T) {
		h := newMirrorHost()
		m := newMirror(h.q, h.k)
		h.k.cut = true
		if _, err := m.Find(chains, map[string]bool{"id-a": true}); err == nil {
			t.Fatal("Find answered from a dump that failed")
		}
		h.k.cut = false
		got, err := m.Find(chains, map[string]bool{"id-a": true})
		if err != nil || len(got) != 1 || m.Reloads() != 2 {
			t.Errorf("after the failure: %q, %v, %d reads of the table; want the one rule from a second read", describe(got), err, m.Reloads())
		}
	})
	t.Run("tables of more rules than a copy may hold: refused for a pause, then read again", func(t *testing.T) {
		h := newMirrorHost()
		m := newMirror(h.q, h.k)
		m.maxRules = 2 // the fake's tables hold 3
		now := time.Unix(1000, 0)
		m.now = func() time.Time { return now }
		for _, after := range []time.Duration{0, 30 * time.Second} {
			now = now.Add(after)
			if _, err := m.Find(chains, map[string]bool{"id-a": true}); !errors.Is(err, errTooMany) {
				t.Fatalf("Find = %v, want errTooMany", err)
			}
		}
		if n := m.Reloads(); n != 1 {
			t.Errorf("the copy read the tables %d times within its pause, want 1", n)
		}
		h.del("masquerading", 3)
		now = now.Add(mirrorPause)
		got, err := m.Find(chains, map[string]bool{"id-a": true})
		if err != nil || len(got) != 1 || m.Reloads() != 2 {
			t.Errorf("after the pause, with 2 rules left: %q, %v, %d reads; want the one rule from a second read", describe(got), err, m.Reloads())
		}
	})
	t.Run("a question from another network namespace is refused", func(t *testing.T) {
		h := newMirrorHost()
		m := newMirror(h.q, h.k)
		m.sameNetns = func() bool { return false }
		if _, err := m.Find(chains, map[string]bool{"id-a": true}); err != errOtherNetns {
			t.Errorf("Find = %v, want errOtherNetns", err)
		}
	})
	t.Run("a closed copy refuses and its subscription is closed", func(t *testing.T) {
		h := newMirrorHost()
		m := newMirror(h.q, h.k)
		m.Close()
		if _, err := m.Any(chains, func(Rule) bool { return true }); err != errMirrorClosed || !h.q.closed {
			t.Errorf("Any = %v, subscription closed %v; want errMirrorClosed and closed", err, h.q.closed)
		}
	})
	t.Run("another read error fails the question", func(t *testing.T) {
		h := newMirrorHost()
		m := newMirror(h.q, h.k)
		h.q.items = append(h.q.items, received{err: syscall.EBADF})
		if _, err := m.Find(chains, map[string]bool{"id-a": true}); err == nil {
			t.Error("Find answered past a failed read")
		}
	})
}

func TestAMirrorsScanSeesEveryRuleOfTheTablesAsked(t *testing.T) {
	h := newMirrorHost()
	m := newMirror(h.q, h.k)
	var seen []uint64
	found, err := m.Any([]Chain{{Family: "ip", Table: "cni_hostport"}}, func(r Rule) bool {
		seen = append(seen, r.Handle)
		return r.Comment == "id-none"
	})
	slices.Sort(seen)
	if err != nil || found || !slices.Equal(seen, []uint64{1, 2, 3}) {
		t.Errorf("Any = %v, %v, saw %v; want false after every rule (1, 2, 3)", found, err, seen)
	}
	h.add("masquerading", "id-new", true)
	found, err = m.Any([]Chain{{Family: "ip", Table: "cni_hostport"}}, func(r Rule) bool { return r.Comment == "id-new" })
	if err != nil || !found {
		t.Errorf("Any = %v, %v after a rule was added; want true", found, err)
	}
}
