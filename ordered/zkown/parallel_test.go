package zkown

import (
	"sync"
	"testing"
	"time"

	"github.com/idgen/idgen/ordered"
)

// The first node of a new cluster claims its shards several at once, not
// one after another (issue 31): every Acquire of the first round waits
// until claimParallel of them are in the handler together. Run one after
// another, the first would wait alone; the guard below turns that hang
// into a failure. Every shard is still granted once, at epoch 1, from now.
func TestTakeoversOfARoundRunConcurrently(t *testing.T) {
	w := newWorld(t)
	a := w.node(addrA, nil)
	var (
		mu      sync.Mutex
		in, top int
		full    = make(chan struct{})
		open    sync.Once
	)
	a.h.acquireErr = func(g ordered.Grant) error {
		mu.Lock()
		in++
		top = max(top, in)
		if in == claimParallel {
			open.Do(func() { close(full) })
		}
		mu.Unlock()
		select {
		case <-full:
		case <-time.After(5 * time.Second): // a deadlock guard, not a timing assertion: the rest pass at once
			mu.Lock()
			t.Errorf("shard %d: %d takeovers in the handler at once, want %d", g.Shard, in, claimParallel)
			mu.Unlock()
			open.Do(func() { close(full) })
		}
		mu.Lock()
		in--
		mu.Unlock()
		return nil
	}
	a.step()
	if t.Failed() {
		return
	}
	if top != claimParallel {
		t.Fatalf("at most %d takeovers at once, want %d (the bound)", top, claimParallel)
	}
	acq := filter(w.j.all(), addrA, "acquire")
	distinctShards(t, acq, "acquisitions")
	if len(acq) != Shards {
		t.Fatalf("%d shards acquired, want %d", len(acq), Shards)
	}
	for _, e := range acq {
		if e.grant.Epoch != 1 || !e.grant.NotBefore.Equal(w.clk.Now()) {
			t.Fatalf("shard %d: grant %+v, want epoch 1 and NotBefore now", e.shard, e.grant)
		}
	}
	checkAssignment(t, w, a)
}
