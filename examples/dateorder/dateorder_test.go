package main

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/idgen/idgen/issuer"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/boltstore"
)

// TestDateOrderServesEndToEnd: the custom strategy registered on channel
// 16 serves through the issuer over the embedded store: yyyyMMdd and a
// zero-padded per-day sequence, restarting each day, unique, while the
// built-in channels keep serving.
func TestDateOrderServesEndToEnd(t *testing.T) {
	store, err := boltstore.Open(t.TempDir(), boltstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = store.Close() })
	day := time.Date(2026, 11, 22, 23, 59, 0, 0, time.UTC)
	now := func() time.Time { return day }
	is, done, err := New(store, now)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(done)
	ctx := context.Background()
	if _, err := is.CreateBiz(ctx, segment.Biz{Name: "order", Channel: segment.ChannelUnordered}); err != nil {
		t.Fatal(err)
	}
	ch := Channel
	var got []string
	for _, n := range []int{2, 1} {
		resp, err := is.Next(ctx, issuer.Request{Biz: "order", Channel: &ch, Count: n})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Channel != Channel {
			t.Fatalf("served by channel %d, want %d", resp.Channel, Channel)
		}
		for _, r := range resp.Ranges {
			for v := r.First; v <= r.Last; v++ {
				got = append(got, fmt.Sprint(v))
			}
		}
	}
	day = day.Add(time.Minute) // the next day
	resp, err := is.Next(ctx, issuer.Request{Biz: "order", Channel: &ch, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	got = append(got, fmt.Sprint(resp.Ranges[0].First))
	want := []string{"20261122000001", "20261122000002", "20261122000003", "20261123000001"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("order numbers %v, want %v", got, want)
	}
	// The built-in channels are still there.
	if _, err := is.Next(ctx, issuer.Request{Biz: "order", Count: 1}); err != nil {
		t.Fatalf("UNORDERED beside the custom strategy: %v", err)
	}
	// An unregistered channel is refused with the registered ones named.
	bad := segment.Channel(17)
	if _, err := is.Next(ctx, issuer.Request{Biz: "order", Channel: &bad, Count: 1}); !errors.Is(err, issuer.ErrInvalid) {
		t.Fatalf("channel 17: %v, want ErrInvalid", err)
	}
}
