package boltstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/clock/clocktest"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/storetest"
)

func open(t *testing.T, dir string, opts Options) *Store {
	t.Helper()
	if opts.LockTimeout == 0 {
		opts.LockTimeout = 100 * time.Millisecond
	}
	s, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) segment.Store {
		return open(t, t.TempDir(), Options{})
	})
}

// TestReopenNeverReissues closes and reopens the store between
// reservations: every number handed out before the close stays used.
func TestReopenNeverReissues(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	s := open(t, dir, Options{})
	if _, err := s.CreateBiz(ctx, segment.Biz{Name: "order", StartNum: 100}); err != nil {
		t.Fatal(err)
	}
	var seg, ord int64 = 99, 0
	for round := range 3 {
		r, err := s.ReserveSegment(ctx, "order", 10)
		if err != nil || r.First != seg+1 {
			t.Fatalf("round %d: segment %v, %v; want it to start at %d", round, r, err, seg+1)
		}
		seg = r.Last
		o, err := s.ReserveOrdered(ctx, segment.OrderedRequest{Biz: "order", SubKey: "u1", Count: 2, RequestID: "req"})
		if round == 0 {
			ord = o.Last
		}
		if err != nil || o.Last != ord {
			t.Fatalf("round %d: replayed ordered range %v, %v; want the first one (ending %d) across reopen", round, o, err, ord)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		s = open(t, dir, Options{})
	}
	b, err := s.GetBiz(ctx, "order")
	if err != nil || b.StartNum != 100 {
		t.Fatalf("biz after reopen: %+v, %v", b, err)
	}
}

func TestSecondOpenFails(t *testing.T) {
	dir := t.TempDir()
	first := open(t, dir, Options{})
	_, err := Open(dir, Options{LockTimeout: 50 * time.Millisecond})
	if !errors.Is(err, ErrDirInUse) || !strings.Contains(err.Error(), "data dir in use by another idgen process") {
		t.Fatalf("second Open: %v, want ErrDirInUse", err)
	}
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	open(t, dir, Options{}) // the lock is released on Close
}

func TestCreatedAtKeptAcrossOpens(t *testing.T) {
	dir := t.TempDir()
	clk := clocktest.New(time.Date(2024, 5, 6, 7, 8, 9, 123456789, time.FixedZone("X", 3600)))
	s := open(t, dir, Options{Clock: clk})
	want := s.CreatedAt()
	if !want.Equal(clk.Now()) || want.Location() != time.UTC {
		t.Fatalf("CreatedAt = %v, want %v in UTC", want, clk.Now())
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	clk.Add(48 * time.Hour)
	s = open(t, dir, Options{Clock: clk})
	if got := s.CreatedAt(); !got.Equal(want) {
		t.Fatalf("CreatedAt after reopen = %v, want %v", got, want)
	}
}

func TestRequestRetention(t *testing.T) {
	ctx := context.Background()
	clk := clocktest.New(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC))
	s := open(t, t.TempDir(), Options{Clock: clk, RequestRetention: time.Hour, CleanupInterval: time.Hour})
	if _, err := s.CreateBiz(ctx, segment.Biz{Name: "b"}); err != nil {
		t.Fatal(err)
	}
	reserve := func(id string, count int64) (segment.Range, bool) {
		t.Helper()
		r, err := s.ReserveOrderedReplay(ctx, segment.OrderedRequest{Biz: "b", SubKey: "k", Count: count, RequestID: id})
		if err != nil {
			t.Fatalf("reserve %q: %v", id, err)
		}
		return r.Range, r.Replayed
	}
	for i := range 5 {
		reserve("old-"+string(rune('a'+i)), 1)
	}
	clk.Add(30 * time.Minute)
	young, _ := reserve("young", 1)

	// Within the retention a retry replays, after it the id is new again
	// even before cleanup ran.
	clk.Add(31 * time.Minute)
	if r, replayed := reserve("young", 1); !replayed || r != young {
		t.Fatalf("retry within retention: %v replayed=%v, want %v", r, replayed, young)
	}
	if r, replayed := reserve("old-a", 3); replayed || r.Len() != 3 {
		t.Fatalf("expired id reused: %v replayed=%v, want a new range of 3", r, replayed)
	}

	// Cleanup is bounded per pass and leaves unexpired ids alone.
	tests := []struct{ limit, want int }{{2, 2}, {10, 2}, {10, 0}}
	for _, tc := range tests {
		n, err := s.purgeExpired(clk.Now(), tc.limit)
		if err != nil || n != tc.want {
			t.Fatalf("purgeExpired(limit %d) = %d, %v; want %d", tc.limit, n, err, tc.want)
		}
	}
	if r, replayed := reserve("young", 1); !replayed || r != young {
		t.Fatalf("young id after cleanup: %v replayed=%v, want %v", r, replayed, young)
	}
	if _, replayed := reserve("old-a", 3); !replayed {
		t.Fatal("the re-used old-a id was purged although it is new")
	}
}

func TestContextDeadline(t *testing.T) {
	s := open(t, t.TempDir(), Options{})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.ReserveSegment(ctx, "x", 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("ReserveSegment with a cancelled context: %v", err)
	}
}

func TestOptionsValidation(t *testing.T) {
	tests := []struct {
		name  string
		opts  Options
		field string
	}{
		{"lock timeout", Options{LockTimeout: -1}, "LockTimeout"},
		{"retention", Options{RequestRetention: -1}, "RequestRetention"},
		{"cleanup interval", Options{CleanupInterval: -1}, "CleanupInterval"},
		{"cleanup batch", Options{CleanupBatch: -1}, "CleanupBatch"},
		{"batch delay", Options{BatchDelay: -1}, "BatchDelay"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Open(t.TempDir(), tc.opts)
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("Open: %v, want an error naming %s", err, tc.field)
			}
		})
	}
}

// TestLegacyBizIsIssued: a business stored before output settings existed
// (no key) counts as having issued, so its output can no longer switch to
// obfuscation (which could repeat numbers it handed out) and its next
// number needs no store write.
func TestLegacyBizIsIssued(t *testing.T) {
	b, err := decodeBiz([]byte(`{"name":"old","channel":2,"step":1000,"start_num":1}`))
	if err != nil || !b.Issued {
		t.Fatalf("legacy record: %+v %v; want Issued", b, err)
	}
	b, err = decodeBiz([]byte(`{"name":"new","channel":2,"step":1000,"start_num":1,"secret_key":"AAAAAAAAAAAAAAAAAAAAAA=="}`))
	if err != nil || b.Issued {
		t.Fatalf("new record: %+v %v; want not Issued", b, err)
	}
}
