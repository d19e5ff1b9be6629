package mysqlstore

import (
	"context"
	"errors"
	"fmt"
	gonet "net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idgen/idgen/ordered"
	"github.com/idgen/idgen/ordered/storetest"
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

// BenchmarkLeaseRenewal is the store-held lease's cost on the test
// MariaDB, each iteration timing, one after the other (so that the ratios
// hold on a busy machine): a renewal of the 22 shards a node of three
// serves (RenewLease, one statement), a renewal of one shard, the read of
// every nonce (LeaseNonces, one SELECT: each reconcile round), and an
// empty group commit of the same 22 shards (PersistShards: BEGIN, the
// fence, COMMIT), the baseline:
//
//	go test -run '^$' -bench BenchmarkLeaseRenewal -benchtime 2000x ./ordered/mysqlstore
func BenchmarkLeaseRenewal(b *testing.B) {
	_, st := open(b, newTestDatabase(b), nil)
	ctx := testCtx(b)
	const shards = 22
	parts := make([]ordered.ShardEpoch, shards)
	writes := make([]ordered.ShardWrite, shards)
	for i := range shards {
		if err := st.Claim(ctx, i, 1, "bench:1"); err != nil {
			b.Fatal(err)
		}
		parts[i] = ordered.ShardEpoch{Shard: i, Epoch: 1}
		writes[i] = ordered.ShardWrite{Shard: i, Epoch: 1}
	}
	var renew22, renew1, read, commit time.Duration
	timed := func(d *time.Duration, f func() error) {
		start := time.Now()
		if err := f(); err != nil {
			b.Fatal(err)
		}
		*d += time.Since(start)
	}
	b.ResetTimer()
	for range b.N {
		timed(&renew22, func() error {
			got, err := st.RenewLease(ctx, "bench:1", parts)
			if err == nil && len(got) != shards {
				err = fmt.Errorf("renewed %d shards, want %d", len(got), shards)
			}
			return err
		})
		timed(&renew1, func() error { _, err := st.RenewLease(ctx, "bench:1", parts[:1]); return err })
		timed(&read, func() error { _, err := st.LeaseNonces(ctx); return err })
		timed(&commit, func() error { _, err := st.PersistShards(ctx, writes); return err })
	}
	n := float64(b.N)
	b.ReportMetric(renew22.Seconds()*1e6/n, "us/renew22")
	b.ReportMetric(renew1.Seconds()*1e6/n, "us/renew1")
	b.ReportMetric(read.Seconds()*1e6/n, "us/nonces")
	b.ReportMetric(commit.Seconds()*1e6/n, "us/commit22")
	b.ReportMetric(float64(renew22)/float64(commit), "renew22/commit22")
}

// BenchmarkPersistSequential is one caller's group commits back to back
// (parts shards of one row each, no request ids): the latency of one
// commit, i.e. its round trips and the flush, with nothing queued:
//
//	go test -run '^$' -bench BenchmarkPersistSequential -benchtime 2000x ./ordered/mysqlstore
func BenchmarkPersistSequential(b *testing.B) {
	dsn := newTestDatabase(b)
	net := fmt.Sprintf("rtcount%d", dialNets.Add(1))
	counter := &turnCounter{}
	mysql.RegisterDialContext(net, func(ctx context.Context, addr string) (gonet.Conn, error) {
		c, err := (&gonet.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		return &countedConn{Conn: c, n: counter}, nil
	})
	dsn = strings.Replace(dsn, "@tcp(", "@"+net+"(", 1)
	_, st := open(b, dsn, nil)
	ctx := testCtx(b)
	for _, parts := range []int{1, 8} {
		b.Run(fmt.Sprintf("shards=%d", parts), func(b *testing.B) {
			ws := make([]ordered.ShardWrite, parts)
			for i := range ws {
				sh := 10 + i
				if err := st.Claim(ctx, sh, 1, "bench"); err != nil {
					b.Fatal(err)
				}
				ws[i] = ordered.ShardWrite{Shard: sh, Epoch: 1, Rows: []ordered.Row{{Key: ordered.Key{Biz: "bseq", SubKey: storetest.SubKeys(sh, "k", 1)[0]}}}}
			}
			b.ResetTimer()
			counter.turns.Store(0)
			for i := range b.N {
				for j := range ws {
					ws[j].Rows[0].Num = int64(i + 1)
				}
				errs, err := st.PersistShards(ctx, ws)
				if err == nil {
					err = errors.Join(errs...)
				}
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(counter.turns.Load())/float64(b.N), "roundtrips/commit")
		})
	}
}

var dialNets atomic.Int64

// turnCounter counts round trips: a write to the server after a read
// from it (or the first write of a connection) starts one.
type turnCounter struct{ turns atomic.Int64 }

type countedConn struct {
	gonet.Conn
	n       *turnCounter
	writing bool
}

func (c *countedConn) Write(p []byte) (int, error) {
	if !c.writing {
		c.writing = true
		c.n.turns.Add(1)
	}
	return c.Conn.Write(p)
}

func (c *countedConn) Read(p []byte) (int, error) {
	c.writing = false
	return c.Conn.Read(p)
}
