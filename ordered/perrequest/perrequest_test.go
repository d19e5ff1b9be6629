package perrequest_test

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/teststores"
	"github.com/idgen/idgen/ordered/perrequest"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/memstore"
)

func newOrdered(t testing.TB, cfg perrequest.Config) *perrequest.Processor {
	t.Helper()
	o, err := perrequest.New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return o
}

// stores are the Store implementations the processor tests run on.
var stores = teststores.All

// mustCreate creates a business in st.
var mustCreate = teststores.MustCreate

// TestOrderedConcurrent: 16 goroutines on 4 keys; each sees its numbers
// strictly increasing per key, and per key the numbers are gap-free.
func TestOrderedConcurrent(t *testing.T) {
	const workers, perWorker = 16, 100
	keys := []string{"a", "b", "c", "d"}
	for _, st := range stores {
		t.Run(st.Name, func(t *testing.T) {
			s := st.Open(t)
			biz := mustCreate(t, s, segment.Biz{Name: "ord", Channel: segment.ChannelOrdered, StartNum: 10})
			o := newOrdered(t, perrequest.Config{Store: s})
			type result struct {
				key string
				r   segment.Range
			}
			results := make([][]result, workers)
			errs := make([]error, workers)
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					last := map[string]int64{}
					for i := range perWorker {
						key := keys[(w+i)%len(keys)]
						r, err := o.Take(context.Background(), biz, key, int64(1+i%4), segment.RequestID{})
						if err != nil {
							errs[w] = err
							return
						}
						if r.First <= last[key] {
							errs[w] = fmt.Errorf("key %s: %v not above %d", key, r, last[key])
							return
						}
						last[key] = r.Last
						results[w] = append(results[w], result{key, r})
					}
				})
			}
			wg.Wait()
			byKey := map[string][]segment.Range{}
			for w := range workers {
				if errs[w] != nil {
					t.Fatalf("worker %d: %v", w, errs[w])
				}
				for _, res := range results[w] {
					byKey[res.key] = append(byKey[res.key], res.r)
				}
			}
			for key, rs := range byKey {
				slices.SortFunc(rs, func(a, b segment.Range) int { return cmp.Compare(a.First, b.First) })
				next := int64(10)
				for _, r := range rs {
					if r.First != next {
						t.Fatalf("key %s: range %v, want one starting at %d", key, r, next)
					}
					next = r.Last + 1
				}
			}
			if st := o.Stats(); st.Regressions != 0 || st.Failures != 0 || st.Keys != len(keys) {
				t.Errorf("stats %+v", st)
			}
		})
	}
}

// TestOrderedRetries: a retry with the same request id gets the same range,
// also through another node, and is not mistaken for a regression.
func TestOrderedRetries(t *testing.T) {
	for _, st := range stores {
		t.Run(st.Name, func(t *testing.T) {
			s := st.Open(t)
			biz := mustCreate(t, s, segment.Biz{Name: "ord"})
			a := newOrdered(t, perrequest.Config{Store: s})
			b := newOrdered(t, perrequest.Config{Store: s}) // another node
			ctx := context.Background()

			r1, err := a.Take(ctx, biz, "k", 2, segment.RequestID{ID: "req-1"})
			if err != nil {
				t.Fatal(err)
			}
			r2, err := b.Take(ctx, biz, "k", 1, segment.RequestID{ID: "req-2"})
			if err != nil || r2.First != r1.Last+1 {
				t.Fatalf("second request: %v, %v", r2, err)
			}
			for _, node := range []*perrequest.Processor{a, b, b} {
				again, err := node.Take(ctx, biz, "k", 2, segment.RequestID{ID: "req-1"})
				if err != nil || again != r1 {
					t.Fatalf("retry: %v, %v; want %v", again, err, r1)
				}
			}
			_, err = a.Take(ctx, biz, "other", 2, segment.RequestID{ID: "req-1"})
			if !errors.Is(err, segment.ErrRequestMismatch) {
				t.Fatalf("request id reused for another key: %v, want ErrRequestMismatch", err)
			}
			if a.Stats().Regressions+b.Stats().Regressions != 0 {
				t.Error("a retry was counted as a regression")
			}
		})
	}
}

// TestOrderedRegressionRaised: a store that went backwards for a key is
// raised above the highest number received, in the same reservation; the
// request is served (never refused until the store catches up by itself),
// nothing at or below a number already handed out comes back, and the
// raise is counted.
func TestOrderedRegressionRaised(t *testing.T) {
	ms := memstore.New()
	biz := mustCreate(t, ms, segment.Biz{Name: "ord"})
	o := newOrdered(t, perrequest.Config{Store: ms})
	ctx := context.Background()
	for range 5 {
		if _, err := o.Take(ctx, biz, "k", 1, segment.RequestID{}); err != nil {
			t.Fatal(err)
		}
	}
	ms.SetOrderedMax(biz.Name, "k", 2) // the store lost 3..5
	want := int64(6)
	for _, reqID := range []string{"", "fresh-id"} {
		r, err := o.Take(ctx, biz, "k", 1, segment.RequestID{ID: reqID})
		if err != nil || r.First != want {
			t.Fatalf("request id %q after the store went back: %v, %v; want %d", reqID, r, err, want)
		}
		want++
	}
	// Other keys are unaffected.
	if r, err := o.Take(ctx, biz, "k2", 1, segment.RequestID{}); err != nil || r.First != 1 {
		t.Fatalf("another key: %v, %v", r, err)
	}
	if got := o.Stats().Regressions; got != 1 {
		t.Errorf("regressions %d, want 1 (the first raise; the row is above since)", got)
	}
}

// TestOrderedRetryNeverReplaysARegressedRange is issue #18's hole 1: the
// store went backwards, a request with a request id reserved a range the
// guard would refuse, and the client's retry with the same id, on this
// node or another, came back as a replay of that range (numbers already
// handed out). Now the first attempt is raised before it is stored, so
// the attempt and every retry answer the same range, above everything
// served.
func TestOrderedRetryNeverReplaysARegressedRange(t *testing.T) {
	ms := memstore.New()
	biz := mustCreate(t, ms, segment.Biz{Name: "ord"})
	nodeA := newOrdered(t, perrequest.Config{Store: ms})
	nodeB := newOrdered(t, perrequest.Config{Store: ms}) // another node: remembers nothing
	ctx := context.Background()
	var served int64
	for range 5 {
		r, err := nodeA.Take(ctx, biz, "chat", 1, segment.RequestID{})
		if err != nil {
			t.Fatal(err)
		}
		served = r.Last
	}
	ms.SetOrderedMax(biz.Name, "chat", 1) // failover: 2..5 lost
	first, err := nodeA.Take(ctx, biz, "chat", 1, segment.RequestID{ID: "req-1"})
	if err != nil {
		t.Fatalf("first attempt after the store went back: %v; want a range above %d", err, served)
	}
	if first.First <= served {
		t.Fatalf("first attempt: %v, not above %d already served", first, served)
	}
	for _, node := range []*perrequest.Processor{nodeA, nodeB, nodeA} {
		again, err := node.Take(ctx, biz, "chat", 1, segment.RequestID{ID: "req-1"})
		if err != nil || again != first {
			t.Fatalf("retry: %v, %v; want the first attempt's %v", again, err, first)
		}
	}
}

// plainStore hides memstore's ReplayReporter.
type plainStore struct{ segment.Store }

// TestOrderedWithoutReplayReports: with a store that cannot say whether a
// range was replayed, retries are accepted and requests without an id are
// still guarded.
func TestOrderedWithoutReplayReports(t *testing.T) {
	ms := memstore.New()
	biz := mustCreate(t, ms, segment.Biz{Name: "ord"})
	o := newOrdered(t, perrequest.Config{Store: plainStore{ms}})
	ctx := context.Background()
	r1, err := o.Take(ctx, biz, "k", 1, segment.RequestID{ID: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := o.Take(ctx, biz, "k", 1, segment.RequestID{ID: "r2"}); err != nil {
		t.Fatal(err)
	}
	if again, err := o.Take(ctx, biz, "k", 1, segment.RequestID{ID: "r1"}); err != nil || again != r1 {
		t.Fatalf("retry: %v, %v; want %v", again, err, r1)
	}
	ms.SetOrderedMax(biz.Name, "k", 0)
	if r, err := o.Take(ctx, biz, "k", 1, segment.RequestID{}); err != nil || r.First != 3 {
		t.Fatalf("request without id after the store went back: %v, %v; want 3..3 (raised)", r, err)
	}
}

// TestOrderedErrors maps store errors to what the handler acts on.
func TestOrderedErrors(t *testing.T) {
	boom := errors.New("connection refused")
	tests := []struct {
		name  string
		setup func(ms *memstore.Store) (release func())
		biz   string
		n     int64
		want  error
	}{
		{"store error", func(ms *memstore.Store) func() { ms.FailNext(1, boom); return func() {} }, "ord", 1, segment.ErrUnavailable},
		{"store hangs", func(ms *memstore.Store) func() { return ms.Block() }, "ord", 1, segment.ErrUnavailable},
		{"unknown biz", nil, "nope", 1, segment.ErrUnknownBiz},
		{"count zero", nil, "ord", 0, segment.ErrInvalid},
		{"count above MaxBatch", nil, "ord", segment.MaxBatch + 1, segment.ErrInvalid},
		{"store says exhausted", func(ms *memstore.Store) func() {
			ms.FailNext(1, fmt.Errorf("counter overflow: %w", segment.ErrExhausted))
			return func() {}
		}, "ord", 1, segment.ErrExhausted},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ms := memstore.New()
			mustCreate(t, ms, segment.Biz{Name: "ord"})
			o := newOrdered(t, perrequest.Config{Store: ms, Timeout: 20 * time.Millisecond})
			if tc.setup != nil {
				defer tc.setup(ms)()
			}
			_, err := o.Take(context.Background(), segment.Biz{Name: tc.biz}, "k", tc.n, segment.RequestID{})
			if !errors.Is(err, tc.want) {
				t.Fatalf("Take: %v, want %v", err, tc.want)
			}
		})
	}
}

func TestOrderedConfigValidation(t *testing.T) {
	ms := memstore.New()
	tests := []struct {
		name  string
		cfg   perrequest.Config
		field string
	}{
		{"no store", perrequest.Config{}, "Store"},
		{"negative timeout", perrequest.Config{Store: ms, Timeout: -1}, "Timeout"},
		{"negative max keys", perrequest.Config{Store: ms, MaxKeys: -1}, "MaxKeys"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := perrequest.New(tc.cfg)
			if !errors.Is(err, segment.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("New: %v, want ErrInvalid naming %s", err, tc.field)
			}
		})
	}
}

// TestOrderedKeysBounded: the guard's memory stays bounded by MaxKeys.
func TestOrderedKeysBounded(t *testing.T) {
	ms := memstore.New()
	biz := mustCreate(t, ms, segment.Biz{Name: "ord"})
	o := newOrdered(t, perrequest.Config{Store: ms, MaxKeys: 64})
	for i := range 1000 {
		if _, err := o.Take(context.Background(), biz, fmt.Sprint("key-", i), 1, segment.RequestID{}); err != nil {
			t.Fatal(err)
		}
	}
	if n := o.Stats().Keys; n > 64 {
		t.Fatalf("guard remembers %d keys, want at most 64", n)
	}
}
