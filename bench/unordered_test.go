package bench

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/memstore"
)

// slowStore adds a fixed delay to every segment reservation, standing in
// for the round trip and commit of a real database.
type slowStore struct {
	segment.Store
	delay time.Duration
}

func (s slowStore) ReserveSegment(ctx context.Context, biz string, step int64) (segment.Range, error) {
	time.Sleep(s.delay)
	return s.Store.ReserveSegment(ctx, biz, step)
}

// newUnordered returns a processor over a fresh in-memory store holding one
// business with the given starting step. maxStep caps the adaptive step
// (0: the package default); a business whose own step is larger keeps it.
func newUnordered(tb testing.TB, step, maxStep int64, delay time.Duration) (*segment.Unordered, segment.Biz) {
	tb.Helper()
	var store segment.Store = memstore.New()
	biz, err := store.CreateBiz(context.Background(), segment.Biz{Name: "bench", Step: step})
	if err != nil {
		tb.Fatal(err)
	}
	if delay > 0 {
		store = slowStore{store, delay}
	}
	u, err := segment.NewUnordered(segment.UnorderedConfig{Store: store, MaxStep: maxStep})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = u.Close() })
	return u, biz
}

// BenchmarkUnordered is the UNORDERED hand-out path in process (no RPC):
// Take of 1, 100 and 4096 IDs from the double buffer, with the default
// starting step (adaptive) and a huge one, on one goroutine and on
// GOMAXPROCS goroutines.
func BenchmarkUnordered(b *testing.B) {
	ctx := context.Background()
	for _, step := range []int64{segment.DefaultStep, segment.MaxStep} {
		for _, n := range []int64{1, 100, 4096} {
			b.Run(fmt.Sprintf("step-%d/take-%d", step, n), func(b *testing.B) {
				u, biz := newUnordered(b, step, 0, 0)
				ids := 0
				for b.Loop() {
					if _, err := u.Take(ctx, biz, n); err != nil {
						b.Fatal(err)
					}
					ids += int(n)
				}
				reportIDs(b, ids)
			})
		}
		b.Run(fmt.Sprintf("step-%d/take-1-parallel", step), func(b *testing.B) {
			u, biz := newUnordered(b, step, 0, 0)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := u.Take(ctx, biz, 1); err != nil {
						b.Error(err)
						return
					}
				}
			})
			reportIDs(b, b.N)
		})
	}
}

// BenchmarkUnorderedRefill measures how well the double buffer hides
// refills from a store that takes 1 ms per reservation: 16 callers take
// single IDs from a business whose step is pinned small (constant
// refills) or huge (no refill during the run). It reports the p99 and
// p99.9 latency of Take besides the mean.
func BenchmarkUnorderedRefill(b *testing.B) {
	const delay = time.Millisecond
	for _, c := range []struct {
		name          string
		step, maxStep int64
	}{
		{"step-1", 1, 1},
		{"step-100", 100, 100},
		{"step-10000", 10000, 10000},
		{"step-huge", segment.MaxStep, 1},
	} {
		b.Run(c.name, func(b *testing.B) {
			u, biz := newUnordered(b, c.step, c.maxStep, delay)
			ctx := context.Background()
			var mu sync.Mutex
			var all []time.Duration
			b.SetParallelism(8) // 8 x GOMAXPROCS callers
			b.RunParallel(func(pb *testing.PB) {
				var lat []time.Duration
				for pb.Next() {
					t0 := time.Now()
					if _, err := u.Take(ctx, biz, 1); err != nil {
						b.Error(err)
						return
					}
					lat = append(lat, time.Since(t0))
				}
				mu.Lock()
				all = append(all, lat...)
				mu.Unlock()
			})
			b.StopTimer()
			slices.Sort(all)
			if len(all) > 0 {
				q := func(p float64) float64 { return float64(all[min(len(all)-1, int(p*float64(len(all))))]) }
				b.ReportMetric(q(0.99), "p99-ns")
				b.ReportMetric(q(0.999), "p99.9-ns")
			}
			reportIDs(b, b.N)
		})
	}
}
