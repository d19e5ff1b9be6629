package mysqlstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idgen/idgen/ordered"
	"github.com/idgen/idgen/segment"
)

// countingStore counts the group commits that reach the store.
type countingStore struct {
	ordered.Store
	commits, parts, rows atomic.Int64
	nanos                atomic.Int64
}

func (s *countingStore) PersistShards(ctx context.Context, parts []ordered.ShardWrite) ([]error, error) {
	start := time.Now()
	errs, err := s.Store.PersistShards(ctx, parts)
	s.nanos.Add(int64(time.Since(start)))
	s.commits.Add(1)
	s.parts.Add(int64(len(parts)))
	for _, p := range parts {
		s.rows.Add(int64(len(p.Rows)))
	}
	return errs, err
}

// BenchmarkOwnedGapless is gapless ORDERED in process (no RPC) on the
// test MariaDB: callers goroutines take single numbers of one hot key or
// of 64 keys through an Allocator whose shards this process owns. It
// reports what a group commit carries (answers, shards, rows) and takes,
// and the commits per second, for the profile of issue 31:
//
//	go test -run '^$' -bench BenchmarkOwnedGapless -benchtime 2000x ./ordered/mysqlstore
func BenchmarkOwnedGapless(b *testing.B) {
	dsn := newTestDatabase(b)
	seg, st := open(b, dsn, nil)
	var runs atomic.Int64 // b.Run runs a case more than once: a business each time
	for _, keys := range []int{1, 64} {
		for _, callers := range []int{16, 64} {
			for _, c := range []struct{ depth, inFlight int }{{1, 1}, {2, 1}, {4, 1}, {2, 2}, {4, 4}} {
				depth := c.depth
				name := fmt.Sprintf("keys=%d/callers=%d/commits=%d/inflight=%d", keys, callers, depth, c.inFlight)
				b.Run(name, func(b *testing.B) {
					biz := mustCreate(b, seg, segment.Biz{Name: fmt.Sprintf("bg%d", runs.Add(1)), Channel: segment.ChannelOrdered,
						StartNum: 1, OrderedMode: segment.OrderedGapless})
					cs := &countingStore{Store: st}
					coord := ordered.NewLocal("bench:1")
					a, err := ordered.New(ordered.Config{Store: cs, Coordinator: coord, Self: "bench:1", GroupCommits: depth, MaxInFlight: c.inFlight})
					if err != nil {
						b.Fatal(err)
					}
					if err := coord.Start(testCtx(b), a); err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { coord.Close(context.Background()) })
					var next atomic.Int64
					var wg sync.WaitGroup
					b.ResetTimer()
					for caller := range callers {
						wg.Go(func() {
							for i := next.Add(1); i <= int64(b.N); i = next.Add(1) {
								sub := fmt.Sprintf("k%d", (int(i)+caller)%keys)
								if _, err := a.Take(context.Background(), biz, sub, 1, segment.RequestID{}); err != nil {
									b.Error(err)
									return
								}
							}
						})
					}
					wg.Wait()
					b.StopTimer()
					if n := cs.commits.Load(); n > 0 {
						b.ReportMetric(float64(b.N)/float64(n), "answers/commit")
						b.ReportMetric(float64(cs.parts.Load())/float64(n), "shards/commit")
						b.ReportMetric(float64(cs.rows.Load())/float64(n), "rows/commit")
						b.ReportMetric(float64(cs.nanos.Load())/float64(n)/1e3, "us/commit")
						b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "commits/s")
					}
				})
			}
		}
	}
}
