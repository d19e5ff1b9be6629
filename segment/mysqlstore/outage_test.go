package mysqlstore

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/mysqldb"
	"github.com/idgen/idgen/internal/testnode"
	"github.com/idgen/idgen/segment"
)

// newPrivateServer starts a MariaDB of this test alone (see
// testnode.StartMariaDB), gated like every integration test.
func newPrivateServer(t *testing.T) *testnode.MariaDB {
	t.Helper()
	testServer(t)
	if testing.Short() {
		t.Skip("starts its own MariaDB")
	}
	return testnode.StartMariaDB(t)
}

// TestIntegration_Outage kills the database under load and starts it again:
// calls fail fast with ErrUnavailable while it is down, the same Store
// recovers by itself, every range handed out before the crash survived it,
// and no number is handed out twice.
func TestIntegration_Outage(t *testing.T) {
	srv := newPrivateServer(t)
	dsn := newTestDatabase(t, srv.Base(), true)
	const timeout = time.Second
	s := openStore(t, dsn, func(c *Config) { c.Timeout = timeout; c.MaxOpenConns = 16 })
	b := mustCreate(t, s, segment.Biz{Name: "outage"})
	keys := []string{"a", "b", "c"}

	type call struct {
		key string // "" for UNORDERED
		r   segment.Range
	}
	const workers = 8
	var (
		stop         atomic.Bool
		restartedAt  atomic.Int64 // unix nanos
		okAfter      atomic.Int64 // successes after the restart
		failures     atomic.Int64
		slowest      atomic.Int64 // nanos, of a failed call
		mu           sync.Mutex
		results      []call
		pending      []segment.OrderedRequest // failed requests with an id, retried at the end
		unexpected   []error
		wg           sync.WaitGroup
		requestCount atomic.Int64
	)
	ctx := testCtx(t)
	for w := range workers {
		wg.Go(func() {
			last := map[string]int64{}
			for i := 0; !stop.Load(); i++ {
				var (
					c   call
					err error
					req segment.OrderedRequest
				)
				start := time.Now()
				if i%2 == 0 {
					c.r, err = s.ReserveSegment(ctx, b.Name, 10)
				} else {
					c.key = keys[(w+i)%len(keys)]
					req = segment.OrderedRequest{Biz: b.Name, SubKey: c.key, Count: int64(1 + i%3)}
					if i%3 == 0 {
						req.RequestID = fmt.Sprintf("w%d-%d", w, requestCount.Add(1))
					}
					c.r, err = s.ReserveOrdered(ctx, req)
				}
				took := time.Since(start)
				if err != nil {
					failures.Add(1)
					for {
						old := slowest.Load()
						if int64(took) <= old || slowest.CompareAndSwap(old, int64(took)) {
							break
						}
					}
					mu.Lock()
					if !errors.Is(err, segment.ErrUnavailable) {
						unexpected = append(unexpected, err)
					}
					if req.RequestID != "" {
						pending = append(pending, req)
					}
					mu.Unlock()
					time.Sleep(20 * time.Millisecond)
					continue
				}
				if ra := restartedAt.Load(); ra != 0 && start.UnixNano() > ra {
					okAfter.Add(1)
				}
				if c.key != "" {
					if c.r.First <= last[c.key] {
						mu.Lock()
						unexpected = append(unexpected, fmt.Errorf("key %q: %v not above %d", c.key, c.r, last[c.key]))
						mu.Unlock()
					}
					last[c.key] = c.r.Last
				}
				mu.Lock()
				results = append(results, c)
				mu.Unlock()
			}
		})
	}

	time.Sleep(time.Second)
	srv.Kill()
	failedBefore := failures.Load()
	time.Sleep(2 * time.Second)
	failedWhileDown := failures.Load() - failedBefore
	srv.Start()
	restartedAt.Store(time.Now().UnixNano())
	deadline := time.Now().Add(60 * time.Second)
	for okAfter.Load() < 100 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	stop.Store(true)
	wg.Wait()

	for _, err := range unexpected {
		t.Errorf("unexpected: %v", err)
	}
	if failedWhileDown == 0 {
		t.Errorf("no call failed while the database was down")
	}
	if okAfter.Load() < 100 {
		t.Fatalf("only %d successful calls within 60s of the restart: the store did not recover", okAfter.Load())
	}
	if sl := time.Duration(slowest.Load()); sl > timeout+2*time.Second {
		t.Errorf("a failing call took %v; Timeout is %v", sl, timeout)
	}
	// Requests whose answer was lost: a retry either replays the range
	// reserved before the crash or reserves anew, never a duplicate.
	replays := 0
	for _, req := range pending {
		rv, err := s.ReserveOrderedReplay(ctx, req)
		r, replayed := rv.Range, rv.Replayed
		if err != nil {
			t.Fatalf("retry of %s after recovery: %v", req.RequestID, err)
		}
		if replayed {
			replays++
		}
		results = append(results, call{req.SubKey, r})
	}

	var segs []segment.Range
	byKey := map[string][]segment.Range{}
	var maxSeg int64
	maxKey := map[string]int64{}
	for _, c := range results {
		if c.key == "" {
			segs = append(segs, c.r)
			maxSeg = max(maxSeg, c.r.Last)
		} else {
			byKey[c.key] = append(byKey[c.key], c.r)
			maxKey[c.key] = max(maxKey[c.key], c.r.Last)
		}
	}
	checkRanges(t, "UNORDERED", segs, 1, false)
	for k, rs := range byKey {
		checkRanges(t, "ORDERED "+k, rs, 1, false)
	}
	// Everything handed out survived the crash.
	var maxID int64
	if err := s.DB().QueryRowContext(ctx, `SELECT max_id FROM segment WHERE biz = ?`, b.Name).Scan(&maxID); err != nil || maxID < maxSeg {
		t.Errorf("after the crash max_id = %d (%v), but %d was handed out", maxID, err, maxSeg)
	}
	for k, m := range maxKey {
		var num int64
		if err := s.DB().QueryRowContext(ctx, `SELECT num FROM `+mysqldb.OrderedTable(Shard(k))+` WHERE biz = ? AND sub_key = ?`, b.Name, []byte(k)).Scan(&num); err != nil || num < m {
			t.Errorf("after the crash key %q num = %d (%v), but %d was handed out", k, num, err, m)
		}
	}
	t.Logf("%d ranges handed out, %d calls failed (%d in the 2 s outage, slowest failure %v), %d request ids retried (%d replayed), %d calls succeeded after the restart",
		len(results), failures.Load(), failedWhileDown, time.Duration(slowest.Load()).Round(time.Millisecond), len(pending), replays, okAfter.Load())
}
