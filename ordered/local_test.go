package ordered

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/idgen/idgen/segment"
)

// overlapHandler records how many Acquires are in it at once; each waits
// until want of them are (or a deadlock guard passes, then none waits).
type overlapHandler struct {
	want int
	mu   sync.Mutex
	in   int
	top  int
	got  map[int]int64
	full chan struct{}
	once sync.Once
}

func (h *overlapHandler) Acquire(_ context.Context, g Grant) error {
	h.mu.Lock()
	h.in++
	h.top = max(h.top, h.in)
	if h.in == h.want {
		h.once.Do(func() { close(h.full) })
	}
	h.mu.Unlock()
	select {
	case <-h.full:
	case <-time.After(5 * time.Second): // a deadlock guard, not a timing assertion: the rest pass at once
		h.once.Do(func() { close(h.full) })
	}
	h.mu.Lock()
	h.in--
	h.got[g.Shard] = g.Epoch
	h.mu.Unlock()
	return nil
}
func (h *overlapHandler) Release(context.Context, int) error { return nil }
func (h *overlapHandler) Lost(int)                           {}

// A standalone node claims its shards several at once (issue 31): the
// embedded store commits concurrent claims together. Every shard is still
// acquired once, at the start's epoch.
func TestLocalStartClaimsConcurrently(t *testing.T) {
	l := NewLocal("127.0.0.1:1")
	h := &overlapHandler{want: localClaimParallel, got: map[int]int64{}, full: make(chan struct{})}
	if err := l.Start(context.Background(), h); err != nil {
		t.Fatal(err)
	}
	if h.top != localClaimParallel {
		t.Fatalf("at most %d claims at once, want %d", h.top, localClaimParallel)
	}
	if len(h.got) != segment.OrderedShards {
		t.Fatalf("%d shards acquired, want %d", len(h.got), segment.OrderedShards)
	}
	for s, e := range h.got {
		if e != l.epoch || l.Owner(s).Epoch != l.epoch {
			t.Fatalf("shard %d: epoch %d (owner %+v), want %d", s, e, l.Owner(s), l.epoch)
		}
	}
}
