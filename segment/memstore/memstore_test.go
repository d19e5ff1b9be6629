package memstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/memstore"
	"github.com/idgen/idgen/segment/storetest"
)

func TestConformance(t *testing.T) {
	storetest.Run(t, func(t *testing.T) segment.Store {
		s := memstore.New()
		t.Cleanup(func() { _ = s.Close() })
		return s
	})
}

func TestFailNext(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	if _, err := s.CreateBiz(ctx, segment.Biz{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	s.FailNext(2, boom)
	for i := range 2 {
		if _, err := s.ReserveSegment(ctx, "a", 10); !errors.Is(err, boom) {
			t.Fatalf("call %d: %v, want boom", i, err)
		}
	}
	r, err := s.ReserveSegment(ctx, "a", 10)
	if err != nil || r.First != 1 {
		t.Fatalf("after the failures: %v, %v; want 1..10 (failed calls reserve nothing)", r, err)
	}
	s.FailNext(1, nil)
	if _, err := s.GetBiz(ctx, "a"); !errors.Is(err, memstore.ErrInjected) {
		t.Fatalf("FailNext(1, nil): %v, want ErrInjected", err)
	}
	if got := s.SegmentCalls(); got != 3 {
		t.Errorf("SegmentCalls = %d, want 3", got)
	}
}

func TestBlock(t *testing.T) {
	s := memstore.New()
	if _, err := s.CreateBiz(context.Background(), segment.Biz{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	release := s.Block()

	// A blocked call honours its context.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if _, err := s.ReserveSegment(ctx, "a", 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("blocked call: %v, want the context's deadline", err)
	}

	done := make(chan error, 1)
	go func() {
		_, err := s.ReserveSegment(context.Background(), "a", 1)
		done <- err
	}()
	for s.Blocked() == 0 {
		time.Sleep(time.Millisecond)
	}
	release()
	release() // idempotent
	if err := <-done; err != nil {
		t.Fatalf("released call: %v", err)
	}
}

func TestSetMaxID(t *testing.T) {
	ctx := context.Background()
	s := memstore.New()
	if _, err := s.CreateBiz(ctx, segment.Biz{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReserveSegment(ctx, "a", 100); err != nil {
		t.Fatal(err)
	}
	if err := s.SetMaxID("a", 10); err != nil {
		t.Fatal(err)
	}
	if r, err := s.ReserveSegment(ctx, "a", 5); err != nil || r.First != 11 {
		t.Fatalf("after moving back: %v, %v; want 11..15", r, err)
	}
	if err := s.SetMaxID("nope", 1); !errors.Is(err, segment.ErrUnknownBiz) {
		t.Fatalf("SetMaxID on unknown biz: %v", err)
	}
	s.SetOrderedMax("a", "k", 41)
	if r, err := s.ReserveOrdered(ctx, segment.OrderedRequest{Biz: "a", SubKey: "k", Count: 1}); err != nil || r.First != 42 {
		t.Fatalf("ordered after SetOrderedMax: %v, %v", r, err)
	}
}
