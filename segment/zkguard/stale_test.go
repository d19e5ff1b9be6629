package zkguard

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/zkfake"
)

// TestStaleRenewalDoesNotShortenTheBound: a renewal of this process's
// member record times out (cluster.Call returns, its write goes on in the
// background), a later renewal succeeds and this process serves from
// memory under the later bound, then the first write reaches ZooKeeper.
// It must not put its earlier bound back: the others would count this
// process gone while it still serves (the simulator's seed 1120 under
// scheduling lag: a node counted gone 1 ms before its own bound allowed,
// about 470 ms early, re-served what it had answered). The record's bound
// must never end before the one this process serves by. Negative control:
// IDGEN_FAULT_STALE_MEMBER_WRITE=1 (faultinject builds) puts the earlier
// bound back.
func TestStaleRenewalDoesNotShortenTheBound(t *testing.T) {
	t.Setenv("IDGEN_FAULT_STALE_MEMBER_WRITE", "1")
	control := faultStaleMemberWrite()
	zks := zkfake.New()
	t.Cleanup(zks.Close)
	var wallMu sync.Mutex
	wall := time.UnixMilli(1_800_000_000_000)
	now := func() time.Time { wallMu.Lock(); defer wallMu.Unlock(); return wall }
	step := func(d time.Duration) { wallMu.Lock(); wall = wall.Add(d); wallMu.Unlock() }
	g := fakeGuard(t, zks, "a:1#1", func(c *Config) {
		c.Self, c.Instance, c.MemberLease, c.Timeout, c.Now = "a:1", "1", 3*time.Second, 100*time.Millisecond, now
	})
	rec := serverRecord{Gen: 1, Server: "server/1"}
	ctx := context.Background()
	if err := g.writeMember(ctx, rec); err != nil {
		t.Fatal(err)
	}
	p := g.memberPath()
	read := func() memberRecord {
		t.Helper()
		data, _, err := g.conn.Get(p)
		if err != nil {
			t.Fatal(err)
		}
		var m memberRecord
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}

	// The first renewal's read of the record stalls past the call's
	// timeout (a lagging scheduler), once.
	release := make(chan struct{})
	var stalled, resumed atomic.Bool
	zks.SetHook(func(_ *zkfake.Conn, op, path string) {
		if op == "get" && strings.HasSuffix(path, "/members/a:1~1") && stalled.CompareAndSwap(false, true) {
			<-release
			resumed.Store(true)
		}
	})
	step(time.Second)
	if err := g.writeMember(ctx, rec); err == nil {
		t.Fatal("the stalled renewal succeeded; want its timeout")
	}
	step(time.Second)
	if err := g.writeMember(ctx, rec); err != nil {
		t.Fatalf("the later renewal: %v", err)
	}
	g.mu.Lock()
	serving := g.selfUntilMs
	g.mu.Unlock()
	if got := read().UntilMs; got != serving {
		t.Fatalf("after the later renewal the record says until %d, this process serves until %d", got, serving)
	}

	close(release)
	// The stalled write now runs: with the switch it writes its earlier
	// bound at once; without, it reads the record and changes nothing, so
	// the record is looked at until the write has had ample time.
	waitFor(t, "the stalled write resumed", 10*time.Second, resumed.Load)
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) && read().UntilMs == serving {
		time.Sleep(10 * time.Millisecond)
	}
	got := read().UntilMs
	if control {
		if got >= serving {
			t.Fatalf("IDGEN_FAULT_STALE_MEMBER_WRITE=1: the record's bound stayed %d (serving until %d); want the hole back: the earlier bound written over the later", got, serving)
		}
		return
	}
	if got < serving {
		t.Fatalf("a renewal that had timed out wrote its earlier bound %d over the later one: the others count this process gone %v before it stops serving from memory (until %d)",
			got, time.Duration(serving-got)*time.Millisecond, serving)
	}
}
