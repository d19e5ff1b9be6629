package zkguard

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idgen/idgen/segment"
)

// TestIntegration_PartedMarksRaised: b stops cleanly and takes its memory
// with it; a lossy failover afterwards lost b's last numbers. a raises
// b's marks, written when b left, before its gate opens (the simulator's
// seeds 173, 214, 215: the next owner repeated a stopped node's numbers).
// Negative control: IDGEN_FAULT_IGNORE_PARTED=1 (faultinject builds).
func TestIntegration_PartedMarksRaised(t *testing.T) {
	t.Setenv("IDGEN_FAULT_IGNORE_PARTED", "1")
	control := faultIgnoreParted()
	c := clusterName(t)
	srv := &fakeServer{id: "server/1"}
	a := newGuard(t, c, "a:1", nil)
	cfg := Config{Servers: testZK(t), Root: "/idgen-test-zkguard", Cluster: c, Self: "b:1",
		SessionTimeout: 4 * time.Second, Timeout: 5 * time.Second, BarrierWait: 20 * time.Second}
	b, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	raised := map[string]int64{}
	raise := func(_ context.Context, marks []segment.OrderedMark) error {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range marks {
			raised[m.Biz+"/"+m.SubKey] = max(raised[m.Biz+"/"+m.SubKey], m.Last)
		}
		return nil
	}
	noop := func(context.Context) error { return nil }
	a.StartBarrier(srv, Repair{Flush: noop, Raise: raise})
	// b remembers many keys: its marks take more than one znode.
	var bMarks []segment.OrderedMark
	for i := range 6000 {
		bMarks = append(bMarks, segment.OrderedMark{Biz: "chat", SubKey: fmt.Sprintf("room-%04d-%s", i, "padding-to-make-the-record-larger-than-one-chunk"), Last: int64(100 + i)})
	}
	b.StartBarrier(srv, Repair{Flush: noop, Remembered: func() []segment.OrderedMark { return bMarks }, Raise: raise})
	waitFor(t, "both gates open", 30*time.Second, func() bool { return open(a) && open(b) })
	b.Close()
	if !control && b.Stats().PartedWritten != uint64(len(bMarks)) {
		t.Fatalf("b wrote %d parted marks, want %d", b.Stats().PartedWritten, len(bMarks))
	}
	mu.Lock()
	clear(raised)
	mu.Unlock()

	srv.set("server/2")
	a.ServerChanged("server/1", "server/2")
	waitFor(t, "a's gate open again", 30*time.Second, func() bool { return open(a) })
	mu.Lock()
	got := len(raised)
	last := raised["chat/"+bMarks[5999].SubKey]
	mu.Unlock()
	if control {
		if got != 0 {
			t.Fatalf("negative control: a raised %d of b's marks: the switch does not reopen the hole", got)
		}
		return
	}
	if got != len(bMarks) || last != 6099 {
		t.Fatalf("a raised %d marks (last key at %d) before its gate opened; want all %d of b's (6099)", got, last, len(bMarks))
	}
	if s := a.Stats(); s.PartedRaised < uint64(len(bMarks)) {
		t.Fatalf("a stats %+v: want PartedRaised >= %d", s, len(bMarks))
	}
}
