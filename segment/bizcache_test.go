package segment_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/memstore"
)

func TestBizCacheServesFromMemory(t *testing.T) {
	ms := memstore.New()
	mustCreate(t, ms, segment.Biz{Name: "b", Step: 42})
	c := segment.NewBizCache(ms, time.Hour)
	calls := ms.BizCalls()
	for range 10 {
		b, err := c.Get(context.Background(), "b")
		if err != nil || b.Step != 42 {
			t.Fatalf("Get: %+v, %v", b, err)
		}
	}
	if n := ms.BizCalls() - calls; n != 1 {
		t.Fatalf("%d store reads for 10 Gets, want 1", n)
	}
}

// TestBizCacheMissesShareOneRead: a burst of misses makes one store call.
func TestBizCacheMissesShareOneRead(t *testing.T) {
	ms := memstore.New()
	mustCreate(t, ms, segment.Biz{Name: "b"})
	c := segment.NewBizCache(ms, time.Hour)
	calls := ms.BizCalls()
	release := ms.Block()
	var wg sync.WaitGroup
	errs := make([]error, 50)
	for i := range errs {
		wg.Go(func() { _, errs[i] = c.Get(context.Background(), "b") })
	}
	waitFor(t, "the read to reach the store", func() bool { return ms.Blocked() == 1 })
	release()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("Get %d: %v", i, err)
		}
	}
	if n := ms.BizCalls() - calls; n != 1 {
		t.Fatalf("%d store reads for a burst of 50 misses, want 1", n)
	}
}

// TestBizCacheRefreshes: a change made elsewhere is seen after the TTL,
// and a stale entry keeps serving while the store is down.
func TestBizCacheRefreshes(t *testing.T) {
	ms := memstore.New()
	mustCreate(t, ms, segment.Biz{Name: "b", Step: 1})
	const ttl = 5 * time.Millisecond
	c := segment.NewBizCache(ms, ttl)
	ctx := context.Background()
	if b, err := c.Get(ctx, "b"); err != nil || b.Step != 1 {
		t.Fatalf("Get: %+v, %v", b, err)
	}
	step := int64(2)
	if _, err := ms.UpdateBiz(ctx, "b", segment.BizUpdate{Step: &step}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the update to be seen", func() bool {
		b, err := c.Get(ctx, "b")
		return err == nil && b.Step == 2
	})

	ms.FailNext(1_000_000, nil)
	time.Sleep(2 * ttl)
	for range 20 {
		b, err := c.Get(ctx, "b")
		if err != nil || b.Step != 2 {
			t.Fatalf("Get with the store down: %+v, %v; want the stale entry", b, err)
		}
		time.Sleep(ttl / 2)
	}
}

func TestBizCacheUnknown(t *testing.T) {
	ms := memstore.New()
	c := segment.NewBizCache(ms, time.Hour)
	ctx := context.Background()
	calls := ms.BizCalls()
	for range 3 {
		if _, err := c.Get(ctx, "later"); !errors.Is(err, segment.ErrUnknownBiz) {
			t.Fatalf("Get of an unknown business: %v, want ErrUnknownBiz", err)
		}
	}
	if n := ms.BizCalls() - calls; n != 1 {
		t.Fatalf("%d store reads for a repeatedly unknown name, want 1 (cached)", n)
	}
	mustCreate(t, ms, segment.Biz{Name: "later"})
	c.Invalidate("later")
	if b, err := c.Get(ctx, "later"); err != nil || b.Name != "later" {
		t.Fatalf("Get after create and Invalidate: %+v, %v", b, err)
	}
}

func TestBizCacheErrors(t *testing.T) {
	tests := []struct {
		name  string
		setup func(ms *memstore.Store) (release func())
		biz   string
		ctx   func(t *testing.T) context.Context
		want  error
	}{
		{"invalid name", nil, "a b", nil, segment.ErrInvalid},
		{"store down, nothing cached", func(ms *memstore.Store) func() { ms.FailNext(1, nil); return func() {} }, "b", nil, segment.ErrUnavailable},
		{"store hangs past the deadline", func(ms *memstore.Store) func() { return ms.Block() }, "b",
			func(t *testing.T) context.Context { return shortCtx(t) }, segment.ErrUnavailable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ms := memstore.New()
			mustCreate(t, ms, segment.Biz{Name: "b"})
			c := segment.NewBizCache(ms, time.Hour)
			if tc.setup != nil {
				defer tc.setup(ms)()
			}
			ctx := context.Background()
			if tc.ctx != nil {
				ctx = tc.ctx(t)
			}
			if _, err := c.Get(ctx, tc.biz); !errors.Is(err, tc.want) {
				t.Fatalf("Get: %v, want %v", err, tc.want)
			}
		})
	}
}
