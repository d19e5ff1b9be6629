package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/idgen/idgen/ext"
	"github.com/idgen/idgen/internal/inproc"
	"github.com/idgen/idgen/internal/wait"
	"github.com/idgen/idgen/issuer"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/boltstore"
	"github.com/idgen/idgen/server"
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
	// The business lists channel 16 beside its default: a business serves
	// only the channels it lists.
	if _, err := is.CreateBiz(ctx, segment.Biz{Name: "order", Channel: segment.ChannelUnordered, Channels: []segment.Channel{Channel}}); err != nil {
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

// TestEmbeddedServerServesChannel16: the whole server, embedded with
// server.Run and the strategy registered through Options.Register, serves
// channel 16 over Kitex beside the built-in channels.
func TestEmbeddedServerServesChannel16(t *testing.T) {
	// Admin RPCs (CreateBiz below) always need the admin token: given
	// here by file, as an operator would.
	adminToken := "dateorder-example-admin-token"
	tokenFile := filepath.Join(t.TempDir(), "admin.token")
	if err := os.WriteFile(tokenFile, []byte(adminToken), 0o600); err != nil {
		t.Fatal(err)
	}
	n := inproc.Start(t, server.Options{Version: "test", Register: func(r *ext.Registry) error {
		return r.RegisterStrategy(Channel, &Strategy{Registry: r})
	}}, "--data-dir", t.TempDir(), "--admin-token-file", tokenFile)
	c := n.Client(t)
	biz := "order"
	wait.OK(t, 30*time.Second, "the server serving CreateBiz", func() error {
		_, err := c.CreateBiz(context.Background(), &idl.CreateBizRequest{Name: biz, Token: &adminToken,
			Channels: []idl.Channel{idl.Channel(Channel), idl.Channel_SNOWFLAKE}})
		return err
	})
	ch := idl.Channel(Channel)
	today := time.Now().UTC().Format("20060102")
	var last int64
	for i := 0; i < 3; i++ {
		resp, err := c.NextIDs(context.Background(), &idl.NextIDsRequest{Biz: biz, Channel: &ch, Count: 2})
		if err != nil {
			t.Fatalf("NextIDs on channel %d: %v", Channel, err)
		}
		for _, r := range resp.Ranges {
			for n := r.First; n <= r.Last; n++ {
				s := fmt.Sprint(n)
				if n <= last || len(s) != 14 || (s[:8] != today && s[:8] != time.Now().UTC().Format("20060102")) {
					t.Fatalf("got %d after %d; want yyyyMMdd (%s) and six digits, rising", n, last, today)
				}
				last = n
			}
		}
	}
	snow := idl.Channel_SNOWFLAKE
	if _, err := c.NextIDs(context.Background(), &idl.NextIDsRequest{Biz: biz, Channel: &snow, Count: 1}); err != nil {
		t.Errorf("built-in SNOWFLAKE beside channel 16: %v", err)
	}
}
