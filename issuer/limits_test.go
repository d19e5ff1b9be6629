package issuer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/segment"
)

func i64p(v int64) *int64 { return &v }

// TestIDQuota: the quota counts IDs, not requests; over it the refusal
// wraps ErrRateLimited with the time until enough IDs are available; a
// count above the burst is invalid; a changed quota applies; refusals are
// counted per business and limit. The fake clock drives the bucket.
func TestIDQuota(t *testing.T) {
	f := newIssuer(t, nil)
	ctx := context.Background()
	if _, err := f.is.CreateBiz(ctx, segment.Biz{Name: "q", Channel: segment.ChannelUnordered, IDQuota: 100}); err != nil {
		t.Fatal(err)
	}
	next := func(n int) error {
		_, err := f.is.Next(ctx, Request{Biz: "q", Count: n})
		return err
	}
	if err := next(60); err != nil {
		t.Fatal(err)
	}
	err := next(60) // 40 left: 20 more needed, 200 ms at 100/s
	var le *LimitError
	if !errors.Is(err, ErrRateLimited) || !errors.As(err, &le) || le.Limit != LimitIDs || f.is.RetryAfter(err) != 200*time.Millisecond {
		t.Fatalf("over the quota: %v (retry after %v), want ErrRateLimited on ids after 200ms", err, f.is.RetryAfter(err))
	}
	f.clk.Add(199 * time.Millisecond)
	if err := next(60); !errors.Is(err, ErrRateLimited) {
		t.Fatalf("1 ms early: %v", err)
	}
	f.clk.Add(time.Millisecond)
	if err := next(60); err != nil {
		t.Fatalf("after the retry hint: %v", err)
	}
	if err := next(101); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "id_burst 100") {
		t.Fatalf("count above the burst: %v, want ErrInvalid naming id_burst", err)
	}
	if got := counterValue(f.is.rateLimited.WithLabelValues("q", LimitIDs)); got != 2 {
		t.Errorf("idgen_rate_limited_total{biz=q,limit=ids} = %v, want 2", got)
	}

	// A raised quota and burst apply with the next look at the business;
	// the IDs already earned carry over.
	if _, err := f.is.UpdateBiz(ctx, "q", segment.BizUpdate{IDQuota: i64p(1000), IDBurst: i64p(2000)}); err != nil {
		t.Fatal(err)
	}
	if err := next(1500); !errors.Is(err, ErrRateLimited) || f.is.RetryAfter(err) != 1500*time.Millisecond {
		t.Fatalf("with an empty bucket: %v (retry %v), want 1.5 s at 1000/s", err, f.is.RetryAfter(err))
	}
	f.clk.Add(1500 * time.Millisecond)
	if err := next(1500); err != nil {
		t.Fatalf("within the new burst: %v", err)
	}
	// Quota 0: unlimited.
	if _, err := f.is.UpdateBiz(ctx, "q", segment.BizUpdate{IDQuota: i64p(0), IDBurst: i64p(0)}); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := next(DefaultMaxBatch); err != nil {
			t.Fatalf("unlimited: %v", err)
		}
	}
}

// TestRequestRateRetryAfter: the request rate (rate_limit) runs on the
// same clock and says when the next request passes.
func TestRequestRateRetryAfter(t *testing.T) {
	f := newIssuer(t, nil)
	ctx := context.Background()
	if _, err := f.is.CreateBiz(ctx, segment.Biz{Name: "r", Channel: segment.ChannelUnordered, RateLimit: 4}); err != nil {
		t.Fatal(err)
	}
	for i := range 4 {
		if _, err := f.is.Next(ctx, Request{Biz: "r", Count: 1}); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	_, err := f.is.Next(ctx, Request{Biz: "r", Count: 1})
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != LimitRequests || f.is.RetryAfter(err) != 250*time.Millisecond {
		t.Fatalf("5th request: %v (retry %v), want requests, 250ms", err, f.is.RetryAfter(err))
	}
	f.clk.Add(250 * time.Millisecond)
	if _, err := f.is.Next(ctx, Request{Biz: "r", Count: 1}); err != nil {
		t.Fatal(err)
	}
	if got := counterValue(f.is.rateLimited.WithLabelValues("r", LimitRequests)); got != 1 {
		t.Errorf("idgen_rate_limited_total{biz=r,limit=requests} = %v, want 1", got)
	}
}

// TestAutoCreateCap: auto-creation stops at AutoCreateMax businesses with
// ErrUnknownBiz naming the fix; the count is listed at most once a second
// (a business created by another node meanwhile is seen at the next list).
func TestAutoCreateCap(t *testing.T) {
	f := newIssuer(t, func(c *Config) { c.AutoCreateMax = 3 })
	ctx := context.Background()
	if _, err := f.is.CreateBiz(ctx, segment.Biz{Name: "a", Channel: segment.ChannelUnordered}); err != nil {
		t.Fatal(err)
	}
	auto := func(name string) error {
		_, err := f.is.Next(ctx, Request{Biz: name, Channel: chp(segment.ChannelUnordered), Count: 1})
		return err
	}
	if err := auto("b"); err != nil { // lists: 1 business, then 2
		t.Fatal(err)
	}
	// Another node creates one: the cached count (2) does not know yet.
	if _, err := f.store.CreateBiz(ctx, segment.Biz{Name: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := auto("c"); err != nil {
		t.Fatalf("within the second, the cached count is used: %v", err)
	}
	err := auto("d")
	if !errors.Is(err, segment.ErrUnknownBiz) || !strings.Contains(err.Error(), "auto-creation limit was reached") ||
		!strings.Contains(err.Error(), "idctl biz create d") {
		t.Fatalf("beyond the cap: %v, want ErrUnknownBiz naming the limit and idctl biz create", err)
	}
	if _, err := f.is.GetBiz(ctx, "d"); !errors.Is(err, segment.ErrUnknownBiz) {
		t.Fatalf("d was created: %v", err)
	}
	f.clk.Add(time.Second)
	if err := auto("d"); !errors.Is(err, segment.ErrUnknownBiz) || !strings.Contains(err.Error(), "holds 4 businesses") {
		t.Fatalf("after the next list: %v, want the 4 stored businesses counted", err)
	}
	if err := auto("a"); err != nil {
		t.Fatalf("an existing business is served at the cap: %v", err)
	}
	if _, err := New(Config{Store: f.store, Unordered: f.is.cfg.Unordered, Ordered: f.is.cfg.Ordered, Bizs: f.is.cfg.Bizs, AutoCreateMax: -1}); err == nil {
		t.Error("a negative AutoCreateMax was accepted")
	}
	g := newIssuer(t, nil)
	if g.is.cfg.AutoCreateMax != DefaultAutoCreateMax {
		t.Errorf("AutoCreateMax 0 became %d, want %d", g.is.cfg.AutoCreateMax, DefaultAutoCreateMax)
	}
}

// TestAutoCreateRateAndLog: a node creates at most AutoCreateBurst
// businesses at once and AutoCreatePerSec after, refusing the rest with a
// retry hint; it logs at most one creation per second, with the number not
// logged.
func TestAutoCreateRateAndLog(t *testing.T) {
	f := newIssuer(t, nil)
	ctx := context.Background()
	auto := func(name string) error {
		_, err := f.is.Next(ctx, Request{Biz: name, Channel: chp(segment.ChannelUnordered), Count: 1})
		return err
	}
	for i := range AutoCreateBurst {
		if err := auto(fmt.Sprintf("b%d", i)); err != nil {
			t.Fatalf("creation %d: %v", i, err)
		}
	}
	err := auto("late")
	var le *LimitError
	if !errors.As(err, &le) || le.Limit != LimitAutoCreate || f.is.RetryAfter(err) != 200*time.Millisecond ||
		!strings.Contains(err.Error(), "idctl biz create late") {
		t.Fatalf("beyond the burst: %v (retry %v), want ErrRateLimited after 200ms", err, f.is.RetryAfter(err))
	}
	if _, err := f.is.GetBiz(ctx, "late"); !errors.Is(err, segment.ErrUnknownBiz) {
		t.Fatalf("refused business created: %v", err)
	}
	if n := f.logs.FilterMessage("business created on first use").Len(); n != 1 {
		t.Fatalf("%d creation lines within a second, want 1", n)
	}
	f.clk.Add(time.Second)
	if err := auto("late"); err != nil {
		t.Fatal(err)
	}
	lines := f.logs.FilterMessage("business created on first use").All()
	if len(lines) != 2 || lines[1].ContextMap()["not_logged_since_last"] != int64(AutoCreateBurst-1) || lines[1].ContextMap()["biz"] != "late" {
		t.Fatalf("log lines: %+v", lines)
	}
}
