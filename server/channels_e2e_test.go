package server

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/testnode"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
)

// allChannels lists the three built-in channels: tests whose business is
// asked on every channel create it with this list.
var allChannels = []idl.Channel{idl.Channel_UNORDERED, idl.Channel_ORDERED, idl.Channel_SNOWFLAKE}

// bizFor is the business a test's load asks on channel ch: ORDERED (and
// SLOW_ORDERED) get one of their own, since a business created on first
// use serves the channels of its first request (ORDERED alone, or
// SNOWFLAKE with UNORDERED) and the callers of a load race to be first.
func bizFor(biz string, ch idl.Channel) string {
	if ch == idl.Channel_ORDERED || ch == idl.Channel_SLOW_ORDERED {
		return biz + "-ordered"
	}
	return biz
}

// TestE2E_ChannelsOfABusiness (issue 30, item 7) over the RPC surface of
// a real node: an obfuscated code business serves its own channel, and a
// request on another is INVALID_ARGUMENT, not retryable, naming what the
// business serves (on main the ORDERED request answered the codes the
// UNORDERED one had); creating or updating one to serve overlapping
// channels is INVALID_ARGUMENT naming --channels; a plain business lists
// extra channels and GetBiz shows them.
func TestE2E_ChannelsOfABusiness(t *testing.T) {
	node := testnode.Start(t, testnode.Options{DataDir: t.TempDir(), Args: []string{"--auto-create-biz", "false"}})
	node.WaitSnowflake(t, 30*time.Second)
	c := node.Client(t)
	ctx := context.Background()
	obf := true
	code := "code"
	if _, err := c.CreateBiz(ctx, &idl.CreateBizRequest{Name: "coupon", Channel: ch(idl.Channel_UNORDERED), Obfuscate: &obf, Format: &code}); err != nil {
		t.Fatal(err)
	}
	resp, err := c.NextIDs(ctx, &idl.NextIDsRequest{Biz: "coupon", Count: 2})
	if err != nil || len(resp.Codes) != 2 {
		t.Fatalf("UNORDERED codes: %+v, %v", resp, err)
	}
	wantRefused := func(what string, err error, parts ...string) {
		t.Helper()
		var ie *idl.IdgenError
		if !errors.As(err, &ie) || ie.Code != idl.ErrorCode_INVALID_ARGUMENT || ie.Retryable {
			t.Fatalf("%s: %v; want INVALID_ARGUMENT, not retryable", what, err)
		}
		for _, p := range parts {
			if !strings.Contains(ie.Message, p) {
				t.Errorf("%s: message %q does not say %q", what, ie.Message, p)
			}
		}
	}
	for _, channel := range []idl.Channel{idl.Channel_ORDERED, idl.Channel_SLOW_ORDERED} {
		again, err := c.NextIDs(ctx, &idl.NextIDsRequest{Biz: "coupon", Channel: ch(channel), SubKey: str("k"), Count: 2})
		if err == nil {
			t.Fatalf("%s on an UNORDERED code business answered %v (UNORDERED gave %v)", channel, again.Codes, resp.Codes)
		}
		wantRefused(channel.String(), err, `business "coupon" serves unordered`, "another business")
	}
	wantRefused("CreateBiz obfuscated on unordered and ordered",
		func() error {
			_, err := c.CreateBiz(ctx, &idl.CreateBizRequest{Name: "coupon2", Channel: ch(idl.Channel_UNORDERED), Obfuscate: &obf,
				Channels: []idl.Channel{idl.Channel_ORDERED}})
			return err
		}(), "--channels")
	wantRefused("UpdateBiz listing ordered on the code business",
		func() error {
			_, err := c.UpdateBiz(ctx, &idl.UpdateBizRequest{Name: "coupon", Channels: []idl.Channel{idl.Channel_ORDERED}})
			return err
		}(), "--channels")

	// A plain business: --channels ordered alone makes it an ORDERED
	// business (the first listed is the default); listing more serves more.
	b, err := c.CreateBiz(ctx, &idl.CreateBizRequest{Name: "chat", Channels: []idl.Channel{idl.Channel_SLOW_ORDERED}})
	if err != nil || b.Channel != idl.Channel_ORDERED || !slices.Equal(b.Channels, []idl.Channel{idl.Channel_ORDERED}) {
		t.Fatalf("CreateBiz chat --channels slow_ordered: %+v, %v; want ORDERED alone", b, err)
	}
	_, err = c.NextIDs(ctx, &idl.NextIDsRequest{Biz: "chat", Channel: ch(idl.Channel_UNORDERED), Count: 1})
	wantRefused("UNORDERED on chat", err, "idctl biz update --biz chat --channels ordered,unordered")
	if _, err := c.UpdateBiz(ctx, &idl.UpdateBizRequest{Name: "chat", Channels: []idl.Channel{idl.Channel_UNORDERED}}); err != nil {
		t.Fatal(err)
	}
	got, err := c.GetBiz(ctx, &idl.GetBizRequest{Name: "chat"})
	if err != nil || !slices.Equal(got.Channels, []idl.Channel{idl.Channel_UNORDERED, idl.Channel_ORDERED}) {
		t.Fatalf("GetBiz chat: %v, %v; want UNORDERED, ORDERED", got.GetChannels(), err)
	}
	testnode.WaitFor(t, 30*time.Second, "UNORDERED served once listed (business cache)", func() bool {
		_, err := c.NextIDs(ctx, &idl.NextIDsRequest{Biz: "chat", Channel: ch(idl.Channel_UNORDERED), Count: 1})
		return err == nil
	})
}
