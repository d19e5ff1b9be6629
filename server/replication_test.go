package server

import (
	"context"
	"database/sql"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"

	"github.com/idgen/idgen/segment/mysqlstore"
)

// fakeReplSource is the test MySQL server's pool with a server change the
// test fires.
type fakeReplSource struct {
	db *sql.DB
	mu sync.Mutex
	fn []func(old, new string)
}

func (f *fakeReplSource) DB() *sql.DB { return f.db }
func (f *fakeReplSource) OnServerChange(fn func(old, new string)) {
	f.mu.Lock()
	f.fn = append(f.fn, fn)
	f.mu.Unlock()
}
func (f *fakeReplSource) change() {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fn := range f.fn {
		fn("server/1", "server/2")
	}
}

// TestReplicationWatchFreshness (issue 29 hole f): the guard relies on a
// safe verdict only when it is fresh. A verdict read on the server before
// a change is not kept; one older than safeFresh is read again before it
// is trusted. The test server is standalone (no-replica); the cached
// verdict is set to a lossy one to see whether safe() reads again.
func TestReplicationWatchFreshness(t *testing.T) {
	base := os.Getenv("IDGEN_TEST_MYSQL")
	if base == "" {
		t.Skip("IDGEN_TEST_MYSQL not set: run ./build.sh test")
	}
	db, err := sql.Open("mysql", base)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	src := &fakeReplSource{db: db}
	w := startReplicationWatch(context.Background(), src, newMetrics(), zap.NewNop())
	defer w.close()
	if r := w.cur.Load(); r == nil || r.Verdict != mysqlstore.VerdictNoReplica {
		t.Fatalf("standalone test server: %v", r)
	}
	lossy := func(age time.Duration) {
		w.readMu.Lock()
		w.cur.Store(&mysqlstore.Replication{Verdict: mysqlstore.VerdictAsync})
		w.at.Store(time.Now().Add(-age).UnixNano())
		w.readMu.Unlock()
	}
	lossy(0)
	if w.safe() {
		t.Fatal("a fresh lossy verdict read as safe")
	}
	lossy(0)
	src.change() // a failover: the verdict says nothing about the new server
	if !w.safe() {
		t.Fatalf("after a server change the verdict was not read again: %v", w.cur.Load())
	}
	lossy(safeFresh + time.Second)
	if !w.safe() {
		t.Fatalf("a stale verdict was trusted without reading it again: %v", w.cur.Load())
	}
}
