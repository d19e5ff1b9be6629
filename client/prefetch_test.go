package client

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

func prefetchConfig(ch Channel) Config {
	return Config{Prefetch: PrefetchConfig{Bizs: []PrefetchBiz{{Biz: "p", Channel: ch}}, MinBuffer: 50, MaxBuffer: 5000, MaxBatch: 700}}
}

// TestPrefetchNoDuplicates: many goroutines draining one buffer through
// Next and NextN never see an ID twice, and every ID comes from what the
// node issued (run with -race).
func TestPrefetchNoDuplicates(t *testing.T) {
	var s seq
	n := &fakeNode{addr: "a:1", answer: s.serve}
	c := newFakeClient(t, nil, prefetchConfig(Unordered), n)
	const workers, per = 16, 2000
	got := make([][]int64, workers)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Go(func() {
			ctx := context.Background()
			for i := 0; i < per; i++ {
				if i%10 == 0 {
					rs, err := c.NextN(ctx, "p", 7)
					if err != nil {
						t.Error(err)
						return
					}
					for _, r := range rs {
						for id := r.First; id <= r.Last; id++ {
							got[w] = append(got[w], id)
						}
					}
					continue
				}
				id, err := c.Next(ctx, "p")
				if err != nil {
					t.Error(err)
					return
				}
				got[w] = append(got[w], id)
			}
		})
	}
	wg.Wait()
	seen := map[int64]bool{}
	for _, ids := range got {
		for _, id := range ids {
			if seen[id] {
				t.Fatalf("ID %d handed out twice", id)
			}
			if id < 1 || id > s.next.Load() {
				t.Fatalf("ID %d was never issued", id)
			}
			seen[id] = true
		}
	}
	if len(seen) != workers*(per/10*7+per-per/10) {
		t.Fatalf("%d IDs", len(seen))
	}
	// Every request asked the prefetch channel, never more than MaxBatch.
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, r := range n.reqs {
		if r.Channel == nil || *r.Channel != idl.Channel_UNORDERED || r.Count > 700 || r.RequestId != nil {
			t.Fatalf("refill request %+v", r)
		}
	}
}

// TestPrefetchOneRefillInFlight: while a refill is blocked, callers wait
// for it rather than sending their own requests.
func TestPrefetchOneRefillInFlight(t *testing.T) {
	var s seq
	release := make(chan struct{})
	var inFlight, most atomic.Int32
	n := &fakeNode{addr: "a:1"}
	n.answer = func(k int, req *idl.NextIDsRequest) (*idl.NextIDsResponse, error) {
		cur := inFlight.Add(1)
		defer inFlight.Add(-1)
		for {
			m := most.Load()
			if cur <= m || most.CompareAndSwap(m, cur) {
				break
			}
		}
		<-release
		return s.serve(k, req)
	}
	c := newFakeClient(t, nil, prefetchConfig(Snowflake), n)
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Go(func() {
			if _, err := c.Next(context.Background(), "p"); err != nil {
				t.Error(err)
			}
		})
	}
	// Bound by state: wait until the first refill is at the node.
	for n.calls() == 0 {
		time.Sleep(time.Millisecond)
	}
	close(release)
	wg.Wait()
	if most.Load() != 1 {
		t.Fatalf("%d refills in flight at once, want 1", most.Load())
	}
}

// TestPrefetchCloseDropsBuffer: after Close nothing more is handed out;
// the buffered IDs are dropped, not returned.
func TestPrefetchCloseDropsBuffer(t *testing.T) {
	var s seq
	n := &fakeNode{addr: "a:1", answer: s.serve}
	c := newFakeClient(t, nil, prefetchConfig(Unordered), n)
	ctx := context.Background()
	first, err := c.Next(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Next(ctx, "p"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Next after Close: %v", err)
	}
	if _, err := c.NextN(ctx, "p", 3); !errors.Is(err, ErrClosed) {
		t.Fatalf("NextN after Close: %v", err)
	}
	if issued := s.next.Load(); issued <= first {
		t.Fatalf("issued %d, handed out %d: the test needs a buffered rest", issued, first)
	}
	if p := c.pools["p"].def; p.avail != 0 || len(p.spans) != 0 {
		t.Fatalf("buffer kept %d IDs after Close", p.avail)
	}
}

// TestPrefetchMaxAge: a SNOWFLAKE ID older than MaxAge is dropped, never
// handed out.
func TestPrefetchMaxAge(t *testing.T) {
	var s seq
	n := &fakeNode{addr: "a:1", answer: s.serve}
	cfg := prefetchConfig(Snowflake)
	cfg.Prefetch.MaxAge = time.Millisecond
	c := newFakeClient(t, nil, cfg, n)
	ctx := context.Background()
	a, err := c.Next(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	p := c.pools["p"].def
	p.mu.Lock()
	var bufferedTo int64
	for _, sp := range p.spans[p.head:] {
		bufferedTo = max(bufferedTo, sp.last)
	}
	p.mu.Unlock()
	time.Sleep(5 * time.Millisecond) // past MaxAge: no race, the age only grows
	b, err := c.Next(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if b <= bufferedTo || b <= a {
		t.Fatalf("got %d after %d, buffered up to %d: a stale ID was handed out", b, a, bufferedTo)
	}
}

// TestPrefetchRefillError: a refill that fails reaches the waiting caller
// as the call's error.
func TestPrefetchRefillError(t *testing.T) {
	n := &fakeNode{addr: "a:1", answer: func(int, *idl.NextIDsRequest) (*idl.NextIDsResponse, error) {
		return nil, &idl.IdgenError{Code: idl.ErrorCode_UNKNOWN_BIZ, Message: "no"}
	}}
	c := newFakeClient(t, nil, prefetchConfig(Unordered), n)
	_, err := c.Next(context.Background(), "p")
	var ie *idl.IdgenError
	if !errors.As(err, &ie) || ie.Code != idl.ErrorCode_UNKNOWN_BIZ {
		t.Fatalf("err = %v", err)
	}
}

// TestPrefetchNotForOrdered: an ORDERED call never uses the buffer.
func TestPrefetchNotForOrdered(t *testing.T) {
	var s seq
	n := &fakeNode{addr: "a:1", answer: s.serve}
	c := newFakeClient(t, nil, prefetchConfig(Unordered), n)
	r, err := c.Ordered(context.Background(), "p", "k", 3)
	if err != nil || r.Len() != 3 {
		t.Fatalf("%v %v", r, err)
	}
	if n.calls() != 1 || n.reqs[0].Count != 3 {
		t.Fatalf("ORDERED went through the buffer: %+v", n.reqs)
	}
}
