package issuer

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/worker"
)

// TestCodesNeverRepeatAcrossChannels (issue 30, item 7; the old
// reproduction): an obfuscated code business on UNORDERED handed out, for
// ORDERED numbers 1 and 2, the codes its UNORDERED numbers 1 and 2 had
// given, because any caller could name the channel. Whatever channel a
// caller names, no code of the business repeats: the other channels are
// refused as INVALID_ARGUMENT (ErrInvalid), and nothing is allocated.
func TestCodesNeverRepeatAcrossChannels(t *testing.T) {
	f := newIssuer(t, nil)
	f.is.Acquired(worker.Slot{Node: 1, Worker: 1, HighWater: t0.UnixMilli() + 60_000})
	ctx := context.Background()
	if _, err := f.is.CreateBiz(ctx, segment.Biz{Name: "coupon", Channel: segment.ChannelUnordered, Obfuscate: true,
		Format: segment.FormatCode, CodeMinLength: 6}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	served, repeats, handed := 0, 0, 0
	for _, ch := range []segment.Channel{segment.ChannelUnordered, segment.ChannelOrdered, ChannelSlowOrdered,
		segment.ChannelSnowflake, segment.ChannelUnordered} {
		req := Request{Biz: "coupon", Channel: chp(ch), Count: 100}
		if isOrdered(ch) {
			req.SubKey = "k"
		}
		resp, err := f.is.Next(ctx, req)
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("channel %d: %v, want a refusal wrapping ErrInvalid", ch, err)
			}
			continue
		}
		served++
		for _, c := range resp.Codes {
			handed++
			if prev, ok := seen[c]; ok {
				repeats++
				if repeats == 1 {
					t.Errorf("code %s handed out on channel %d repeats one of channel %s", c, ch, prev)
				}
			}
			seen[c] = f.is.channelName(ch)
		}
	}
	if repeats > 0 {
		t.Fatalf("%d of %d codes repeat an earlier one", repeats, handed)
	}
	if served != 2 || len(seen) != 200 {
		t.Fatalf("served %d requests, %d codes; want the 2 UNORDERED requests and 200 codes", served, len(seen))
	}
}

// TestChannelNotServedRefused: a request on a channel its business does
// not list is refused before anything is allocated, as INVALID_ARGUMENT
// (ErrChannelNotServed) naming the channels served and the fix; counted
// per business and channel; logged at most once per window however many
// arrive. Listing the channel (plain business) serves it from its first
// number.
func TestChannelNotServedRefused(t *testing.T) {
	f := newIssuer(t, nil)
	ctx := context.Background()
	if _, err := f.is.CreateBiz(ctx, segment.Biz{Name: "orders", Channel: segment.ChannelUnordered}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 100; i++ {
		_, err := f.is.Next(ctx, Request{Biz: "orders", Channel: chp(segment.ChannelOrdered), SubKey: "k", Count: 5})
		if !errors.Is(err, ErrChannelNotServed) || !errors.Is(err, ErrInvalid) {
			t.Fatalf("ORDERED on an UNORDERED business: %v, want ErrChannelNotServed", err)
		}
		if i == 0 && !strings.Contains(err.Error(), `serves unordered`) || !strings.Contains(err.Error(), "--channels unordered,ordered") {
			t.Fatalf("refusal %q does not say what the business serves and how to add the channel", err)
		}
	}
	if n := testutil.ToFloat64(f.is.chans.refused.WithLabelValues("orders", "ordered")); n != 100 {
		t.Errorf("idgen_channel_refused_total{biz=orders,channel=ordered} = %v, want 100", n)
	}
	if n := f.logs.FilterMessage("request refused: channel not served by its business").Len(); n != 1 {
		t.Errorf("%d log lines for 100 refusals inside one window, want 1", n)
	}
	f.clk.Add(channelRefusedLogEvery)
	if _, err := f.is.Next(ctx, Request{Biz: "orders", Channel: chp(segment.ChannelSnowflake), Count: 1}); !errors.Is(err, ErrChannelNotServed) {
		t.Fatalf("SNOWFLAKE on an UNORDERED business: %v", err)
	}
	lines := f.logs.FilterMessage("request refused: channel not served by its business").All()
	if len(lines) != 2 || lines[1].ContextMap()["not_logged_since_last"] != int64(99) {
		t.Errorf("after the window: %d lines, the last %v; want 2, counting the 99 held back", len(lines), lines[len(lines)-1].ContextMap())
	}

	chs := []segment.Channel{segment.ChannelOrdered}
	b, err := f.is.UpdateBiz(ctx, "orders", segment.BizUpdate{Channels: &chs})
	if err != nil || !slices.Equal(b.Channels, []segment.Channel{segment.ChannelUnordered, segment.ChannelOrdered}) {
		t.Fatalf("listing ORDERED: %v, %v", b.Channels, err)
	}
	resp, err := f.is.Next(ctx, Request{Biz: "orders", Channel: chp(ChannelSlowOrdered), SubKey: "k", Count: 5})
	if err != nil || len(resp.Ranges) != 1 || resp.Ranges[0] != (segment.Range{First: 1, Last: 5}) {
		t.Fatalf("SLOW_ORDERED once ORDERED is listed: %v, %v; want 1..5 (the refusals allocated nothing)", resp.Ranges, err)
	}
}

// TestCreateNonPlainOnOverlappingChannelsRefused: an obfuscated or code
// business cannot list channels whose numbers overlap (ORDERED with
// UNORDERED or SNOWFLAKE, or a custom strategy's), at creation or by
// update; UNORDERED with SNOWFLAKE can, and their values never meet. The
// refusal names the fix.
func TestCreateNonPlainOnOverlappingChannelsRefused(t *testing.T) {
	f := newIssuer(t, nil)
	f.is.Acquired(worker.Slot{Node: 1, Worker: 1, HighWater: t0.UnixMilli() + 60_000})
	ctx := context.Background()
	for _, b := range []segment.Biz{
		{Name: "a", Channel: segment.ChannelUnordered, Channels: []segment.Channel{segment.ChannelOrdered}, Obfuscate: true},
		{Name: "b", Channel: segment.ChannelOrdered, Channels: []segment.Channel{segment.ChannelSnowflake}, Format: segment.FormatCode},
		{Name: "c", Channel: segment.ChannelSnowflake, Channels: []segment.Channel{ChannelSlowOrdered}, Obfuscate: true, Format: segment.FormatCode},
	} {
		_, err := f.is.CreateBiz(ctx, b)
		if !errors.Is(err, segment.ErrInvalid) || !strings.Contains(err.Error(), "--channels") {
			t.Errorf("CreateBiz(%s on %v): %v, want ErrInvalid naming --channels", b.Name, b.Channels, err)
		}
	}
	if _, err := f.is.CreateBiz(ctx, segment.Biz{Name: "d", Channel: segment.ChannelOrdered, Obfuscate: true}); err != nil {
		t.Fatal(err)
	}
	both := []segment.Channel{segment.ChannelUnordered, segment.ChannelOrdered}
	if _, err := f.is.UpdateBiz(ctx, "d", segment.BizUpdate{Channels: &both}); !errors.Is(err, segment.ErrInvalid) {
		t.Errorf("UpdateBiz listing UNORDERED beside ORDERED on an obfuscated business: %v, want ErrInvalid", err)
	}
	// UNORDERED and SNOWFLAKE together: the segment stays below the
	// floor, snowflake IDs are at or above it.
	us := []segment.Channel{segment.ChannelUnordered, segment.ChannelSnowflake}
	if _, err := f.is.CreateBiz(ctx, segment.Biz{Name: "e", Channel: segment.ChannelSnowflake, Channels: us, Obfuscate: true,
		Format: segment.FormatCode}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, ch := range []segment.Channel{segment.ChannelUnordered, segment.ChannelSnowflake, segment.ChannelUnordered, segment.ChannelSnowflake} {
		resp, err := f.is.Next(ctx, Request{Biz: "e", Channel: chp(ch), Count: 50})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range resp.Codes {
			if seen[c] {
				t.Fatalf("code %s repeats across UNORDERED and SNOWFLAKE", c)
			}
			seen[c] = true
		}
	}
	// A channel with no strategy on this node is refused at creation.
	if _, err := f.is.CreateBiz(ctx, segment.Biz{Name: "f", Channels: []segment.Channel{42}}); !errors.Is(err, ErrInvalid) {
		t.Errorf("CreateBiz listing channel 42 (no strategy): %v, want ErrInvalid", err)
	}
}

// TestAutoCreateTakesTheRequestsChannel: a business created on first use
// serves the channel of that first request: ORDERED alone, or SNOWFLAKE
// with UNORDERED (whose numbers never meet); another channel is refused
// afterwards.
func TestAutoCreateTakesTheRequestsChannel(t *testing.T) {
	f := newIssuer(t, nil)
	f.is.Acquired(worker.Slot{Node: 1, Worker: 1, HighWater: t0.UnixMilli() + 60_000})
	ctx := context.Background()
	if _, err := f.is.Next(ctx, Request{Biz: "chat", Channel: chp(segment.ChannelOrdered), SubKey: "room", Count: 2}); err != nil {
		t.Fatal(err)
	}
	b, err := f.store.GetBiz(ctx, "chat")
	if err != nil || b.Channel != segment.ChannelOrdered || !slices.Equal(b.Channels, []segment.Channel{segment.ChannelOrdered}) {
		t.Fatalf("chat created on an ORDERED request: channel %v, channels %v, %v; want ordered alone", b.Channel, b.Channels, err)
	}
	if _, err := f.is.Next(ctx, Request{Biz: "chat", Channel: chp(segment.ChannelUnordered), Count: 2}); !errors.Is(err, ErrChannelNotServed) {
		t.Fatalf("UNORDERED on chat: %v, want ErrChannelNotServed", err)
	}
	if _, err := f.is.Next(ctx, Request{Biz: "order", Count: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.is.Next(ctx, Request{Biz: "order", Channel: chp(segment.ChannelUnordered), Count: 2}); err != nil {
		t.Fatalf("UNORDERED on a business created by a SNOWFLAKE request: %v", err)
	}
	b, err = f.store.GetBiz(ctx, "order")
	if err != nil || b.Channel != segment.ChannelSnowflake ||
		!slices.Equal(b.Channels, []segment.Channel{segment.ChannelUnordered, segment.ChannelSnowflake}) {
		t.Fatalf("order created on a request without channel: channel %v, channels %v, %v; want snowflake with unordered", b.Channel, b.Channels, err)
	}
	if _, err := f.is.Next(ctx, Request{Biz: "order", Channel: chp(segment.ChannelOrdered), SubKey: "k", Count: 2}); !errors.Is(err, ErrChannelNotServed) {
		t.Fatalf("ORDERED on order: %v, want ErrChannelNotServed", err)
	}
}
