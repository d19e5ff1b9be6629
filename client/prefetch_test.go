package client

import (
	"context"
	"errors"
	"fmt"
	"strings"
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
	if !errors.Is(err, ErrUnknownBiz) || Code(err) != ErrUnknownBiz {
		t.Fatalf("err = %v: not ErrUnknownBiz (Code %v)", err, Code(err))
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

// obfSeq answers as an obfuscating business does: one value per number in
// ids (or codes), ranges empty. The values are distinct and not
// contiguous, and every value handed out is remembered.
type obfSeq struct {
	seq
	codes bool
	mu    sync.Mutex
	given map[int64]bool
}

func obfValue(n int64) int64 { return n*1_000_003 + 7 }

func (s *obfSeq) serve(_ int, req *idl.NextIDsRequest) (*idl.NextIDsResponse, error) {
	n := int64(max(req.Count, 1))
	last := s.next.Add(n)
	resp := &idl.NextIDsResponse{Ranges: []*idl.IDRange{}, Channel: *req.Channel, Count: n}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.given == nil {
		s.given = map[int64]bool{}
	}
	for v := last - n + 1; v <= last; v++ {
		if s.codes {
			resp.Codes = append(resp.Codes, fmt.Sprintf("C%07d", v))
			continue
		}
		resp.Ids = append(resp.Ids, obfValue(v))
		s.given[obfValue(v)] = true
	}
	return resp, nil
}

// TestPrefetchObfuscatedIDs: a business whose answers carry obfuscated IDs
// (ids, no ranges) is served from the buffer: every value once, only
// values the node issued, and a bounded number of refills. Before the fix
// the refill read only ranges, added nothing and asked again at once, until
// Close: the bounds below catch that within the test's deadline.
func TestPrefetchObfuscatedIDs(t *testing.T) {
	for _, ch := range []Channel{Unordered, Snowflake} {
		t.Run(ch.String(), func(t *testing.T) {
			s := &obfSeq{}
			n := &fakeNode{addr: "a:1", answer: s.serve}
			c := newFakeClient(t, nil, prefetchConfig(ch), n)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			const workers, per = 8, 300
			got := make([][]int64, workers)
			var wg sync.WaitGroup
			for w := 0; w < workers; w++ {
				wg.Go(func() {
					for i := 0; i < per; i++ {
						if i%10 == 0 {
							rs, err := c.NextN(ctx, "p", 7)
							if err != nil {
								t.Error(err)
								return
							}
							k := int64(0)
							for _, r := range rs {
								for id := r.First; id <= r.Last; id++ {
									got[w] = append(got[w], id)
								}
								k += r.Len()
							}
							if k != 7 {
								t.Errorf("NextN(7) gave %d IDs: %v", k, rs)
								return
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
			if t.Failed() {
				t.Fatalf("after %d NextIDs calls (the buffer holds at most 5000 IDs)", n.calls())
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			seen := map[int64]bool{}
			for _, ids := range got {
				for _, id := range ids {
					if seen[id] {
						t.Fatalf("ID %d handed out twice", id)
					}
					if !s.given[id] {
						t.Fatalf("ID %d was never issued (a number behind an ID, not the ID?)", id)
					}
					seen[id] = true
				}
			}
			if want := workers * (per/10*7 + per - per/10); len(seen) != want {
				t.Fatalf("%d IDs, want %d", len(seen), want)
			}
			// Every request counts toward the buffer: 21600 IDs, in
			// batches of 50..700, is at most a few hundred requests; the
			// hot loop made tens of thousands in this time.
			if k := n.calls(); k > 500 {
				t.Fatalf("%d NextIDs calls for %d IDs: the refill is not using the answers", k, len(seen))
			}
		})
	}
}

// TestPrefetchObfuscatedMaxAge: MaxAge still bounds a buffered SNOWFLAKE
// value by the time its request was sent.
func TestPrefetchObfuscatedMaxAge(t *testing.T) {
	s := &obfSeq{}
	n := &fakeNode{addr: "a:1", answer: s.serve}
	cfg := prefetchConfig(Snowflake)
	cfg.Prefetch.MaxAge = time.Millisecond
	c := newFakeClient(t, nil, cfg, n)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	a, err := c.Next(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	issued := s.next.Load()
	time.Sleep(5 * time.Millisecond) // past MaxAge: the age only grows
	b, err := c.Next(ctx, "p")
	if err != nil {
		t.Fatal(err)
	}
	if b == a || b <= obfValue(issued) {
		t.Fatalf("got %d after %d, %d numbers fetched before: a stale ID was handed out", b, a, issued)
	}
}

// TestPrefetchCodesRefused: a business that answers codes cannot be served
// by Next or NextN (they hand out integers): the first refill sees the
// codes and every prefetched call fails with ErrNotPrefetchable, naming the
// business, without asking the node again. Before the fix the refill asked
// in a hot loop and the call waited until its deadline.
func TestPrefetchCodesRefused(t *testing.T) {
	s := &obfSeq{codes: true}
	n := &fakeNode{addr: "a:1", answer: s.serve}
	c := newFakeClient(t, nil, prefetchConfig(Unordered), n)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := c.Next(ctx, "p")
	if !errors.Is(err, ErrNotPrefetchable) || !strings.Contains(err.Error(), `"p"`) || !strings.Contains(err.Error(), "Prefetch.Bizs") {
		t.Fatalf("Next: %v (after %d NextIDs calls), want ErrNotPrefetchable naming the business and Prefetch.Bizs", err, n.calls())
	}
	if ok, _ := Retryable(err); ok {
		t.Fatalf("%v is retryable", err)
	}
	if _, err := c.NextN(ctx, "p", 3); !errors.Is(err, ErrNotPrefetchable) {
		t.Fatalf("NextN: %v", err)
	}
	if _, err := c.Next(ctx, "p"); !errors.Is(err, ErrNotPrefetchable) {
		t.Fatalf("Next again: %v", err)
	}
	time.Sleep(20 * time.Millisecond) // no refill keeps going in the background
	if k := n.calls(); k != 1 {
		t.Fatalf("%d NextIDs calls, want 1: a refused business is not asked again", k)
	}
	// Fetch, which never uses the buffer, still gets the codes.
	res, err := c.Fetch(ctx, "p", 2, WithChannel(Unordered))
	if err != nil || len(res.Codes) != 2 {
		t.Fatalf("Fetch: %+v, %v", res, err)
	}
}

// TestPrefetchUnusableAnswer: an answer whose shape the buffer cannot use
// (ranges and ids at once) ends the refill with an error for the waiting
// caller; it is not asked for again in a loop.
func TestPrefetchUnusableAnswer(t *testing.T) {
	n := &fakeNode{addr: "a:1", answer: func(_ int, req *idl.NextIDsRequest) (*idl.NextIDsResponse, error) {
		k := int64(req.Count)
		ids := make([]int64, k-1)
		for i := range ids {
			ids[i] = obfValue(int64(i + 2))
		}
		return &idl.NextIDsResponse{Ranges: []*idl.IDRange{{First: 1, Last: 1}}, Ids: ids, Channel: *req.Channel, Count: k}, nil
	}}
	c := newFakeClient(t, nil, prefetchConfig(Unordered), n)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_, err := c.Next(ctx, "p")
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Next: %v after %d NextIDs calls, want the refill's error", err, n.calls())
	}
	time.Sleep(20 * time.Millisecond)
	if k := n.calls(); k != 1 {
		t.Fatalf("%d NextIDs calls, want 1", k)
	}
}
