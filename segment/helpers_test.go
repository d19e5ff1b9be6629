package segment_test

import (
	"context"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/teststores"
	"github.com/idgen/idgen/segment"
)

// stores are the Store implementations the processor tests run on.
var stores = teststores.All

// mustCreate creates a business in st.
var mustCreate = teststores.MustCreate

func newUnordered(t testing.TB, cfg segment.UnorderedConfig) *segment.Unordered {
	t.Helper()
	u, err := segment.NewUnordered(cfg)
	if err != nil {
		t.Fatalf("NewUnordered: %v", err)
	}
	t.Cleanup(func() { _ = u.Close() })
	return u
}

// statsOf returns biz's stats (zero if it has none yet).
func statsOf(u *segment.Unordered, biz string) segment.BizStats {
	for _, s := range u.Stats() {
		if s.Biz == biz {
			return s
		}
	}
	return segment.BizStats{}
}

// waitIdle waits until biz has no load in flight. It polls because the
// load runs on its own goroutine; the deadline only guards against a hang.
func waitIdle(t testing.TB, u *segment.Unordered, biz string) segment.BizStats {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s := statsOf(u, biz)
		if !s.Loading {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("biz %q: load still in flight after 10s", biz)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// waitFor polls cond until it holds (or fails the test after 10s).
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// take is Take with a generous deadline that fails the test on error.
func take(t testing.TB, u *segment.Unordered, biz segment.Biz, n int64) []segment.Range {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rs, err := u.Take(ctx, biz, n)
	if err != nil {
		t.Fatalf("Take(%q, %d): %v", biz.Name, n, err)
	}
	if got := total(rs); got != n {
		t.Fatalf("Take(%q, %d) returned %d IDs in %v", biz.Name, n, got, rs)
	}
	return rs
}

func total(rs []segment.Range) int64 {
	var n int64
	for _, r := range rs {
		n += r.Len()
	}
	return n
}

// shortCtx returns a context that ends soon, for requests expected to give
// up; the tests never assert how long that took.
func shortCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}
