package issuer

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/idgen/idgen/clock"
	"github.com/idgen/idgen/clock/clocktest"
	"github.com/idgen/idgen/ordered/perrequest"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/memstore"
	"github.com/idgen/idgen/snowflake"
	"github.com/idgen/idgen/worker"
)

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

type fixture struct {
	is    *Issuer
	clk   *clocktest.Fake
	logs  *observer.ObservedLogs
	floor int64
	store *memstore.Store
}

func newIssuer(t testing.TB, mod func(*Config)) fixture {
	t.Helper()
	return newIssuerOn(t, memstore.New(), clocktest.New(t0), mod)
}

// newIssuerOn builds an issuer over store and clock fc: several issuers on
// one store are the nodes of one cluster.
func newIssuerOn(t testing.TB, store *memstore.Store, fc *clocktest.Fake, mod func(*Config)) fixture {
	t.Helper()
	layout := snowflake.Layout{}.Normalize()
	floor := layout.Floor(t0.UnixMilli() - 1000)
	u, err := segment.NewUnordered(segment.UnorderedConfig{Store: store, Floor: floor})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = u.Close() })
	o, err := perrequest.New(perrequest.Config{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.InfoLevel)
	cfg := Config{Store: store, Unordered: u, Ordered: o, Bizs: segment.NewBizCache(store, time.Millisecond), Layout: layout,
		Guard: clock.NewGuard(clock.GuardConfig{Clock: fc}, 0), Floor: floor, AutoCreateBiz: true, Logger: zap.New(core)}
	if mod != nil {
		mod(&cfg)
	}
	is, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return fixture{is: is, clk: fc, logs: logs, floor: floor, store: store}
}

func chp(c segment.Channel) *segment.Channel { return &c }

// TestNoSegmentsRefusesSegmentChannels (issue 9 item 1): a ZooKeeper-only
// cluster refuses UNORDERED, ORDERED and fallback with the reason, and
// businesses with those settings cannot be created.
func TestNoSegmentsRefusesSegmentChannels(t *testing.T) {
	why := errors.New("start every node with --mysql DSN")
	f := newIssuer(t, func(c *Config) { c.NoSegments = why })
	ctx := context.Background()
	for _, ch := range []segment.Channel{segment.ChannelUnordered, segment.ChannelOrdered} {
		_, err := f.is.Next(ctx, Request{Biz: "b", Channel: chp(ch), Count: 1, SubKey: map[bool]string{true: "k"}[ch == segment.ChannelOrdered]})
		if !errors.Is(err, segment.ErrNoSegments) || !strings.Contains(err.Error(), "--mysql") {
			t.Errorf("%s: %v, want ErrNoSegments naming --mysql", ch, err)
		}
	}
	if _, err := f.is.CreateBiz(ctx, segment.Biz{Name: "u", Channel: segment.ChannelUnordered}); !errors.Is(err, ErrInvalid) {
		t.Errorf("CreateBiz unordered: %v, want ErrInvalid", err)
	}
	if _, err := f.is.CreateBiz(ctx, segment.Biz{Name: "f", Channel: segment.ChannelSnowflake, Fallback: true}); !errors.Is(err, ErrInvalid) {
		t.Errorf("CreateBiz fallback: %v, want ErrInvalid", err)
	}
	// No slot yet: snowflake refuses, and there is no fallback to offer.
	_, err := f.is.Next(ctx, Request{Biz: "auto", Count: 1})
	if !errors.Is(err, ErrNoWorker) {
		t.Errorf("auto-created business on a node without a slot: %v, want ErrNoWorker", err)
	}
	b, _ := f.is.GetBiz(ctx, "auto")
	if b.Fallback {
		t.Errorf("auto-created business has fallback on a cluster without segments")
	}
}

// TestStartNumBelowFloor (issue 9 item 4): start_num and the first segment
// must stay below the snowflake floor.
func TestStartNumBelowFloor(t *testing.T) {
	f := newIssuer(t, nil)
	ctx := context.Background()
	for _, b := range []segment.Biz{
		{Name: "at", StartNum: f.floor},
		{Name: "above", StartNum: f.floor + 10},
		{Name: "crossing", StartNum: f.floor - 10, Step: 100},
	} {
		if _, err := f.is.CreateBiz(ctx, b); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "floor") {
			t.Errorf("%s: %v, want ErrInvalid naming the floor", b.Name, err)
		}
	}
	if _, err := f.is.CreateBiz(ctx, segment.Biz{Name: "ok", StartNum: f.floor - 1000, Step: 1000}); err != nil {
		t.Errorf("a business just below the floor: %v", err)
	}
}

// TestMaxBatchAgreesWithSegments (issue 9 item 11).
func TestMaxBatchAgreesWithSegments(t *testing.T) {
	store := memstore.New()
	u, _ := segment.NewUnordered(segment.UnorderedConfig{Store: store})
	defer u.Close()
	o, _ := perrequest.New(perrequest.Config{Store: store})
	_, err := New(Config{Store: store, Unordered: u, Ordered: o, Bizs: segment.NewBizCache(store, 0), MaxBatch: segment.MaxBatch + 1})
	if err == nil || !strings.Contains(err.Error(), "max_batch") {
		t.Fatalf("MaxBatch above the segment limit: %v, want a refusal naming max_batch", err)
	}
}

func TestCountMessages(t *testing.T) {
	f := newIssuer(t, nil)
	_, err := f.is.Next(context.Background(), Request{Biz: "b", Count: 0})
	if !errors.Is(err, ErrInvalid) || strings.Contains(err.Error(), "split") {
		t.Errorf("count 0: %v, want ErrInvalid without the batch hint", err)
	}
	_, err = f.is.Next(context.Background(), Request{Biz: "b", Count: DefaultMaxBatch + 1})
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "split") {
		t.Errorf("count too big: %v, want ErrInvalid with the batch hint", err)
	}
}

// TestFencedGivesExactMarkAndShutdownLogsInfo (issue 9 item 9, issue 11):
// LastUsed after Fenced is the last issued millisecond; a clean shutdown
// logs at info, a lost slot at warn.
func TestFencedGivesExactMarkAndShutdownLogsInfo(t *testing.T) {
	f := newIssuer(t, nil)
	if _, err := f.is.CreateBiz(context.Background(), segment.Biz{Name: "b", Channel: segment.ChannelSnowflake}); err != nil {
		t.Fatal(err)
	}
	f.is.Acquired(worker.Slot{Node: 1, Worker: 1, HighWater: t0.UnixMilli() + 60_000})
	resp, err := f.is.Next(context.Background(), Request{Biz: "b", Channel: chp(segment.ChannelSnowflake), Count: 5})
	if err != nil {
		t.Fatal(err)
	}
	p, _ := f.is.Layout().Parse(resp.Ranges[len(resp.Ranges)-1].Last)
	f.clk.Add(time.Hour) // a refused forward reading must not count
	if _, err := f.is.Next(context.Background(), Request{Biz: "b", Channel: chp(segment.ChannelSnowflake), Count: 1}); !errors.Is(err, snowflake.ErrClockJump) {
		t.Fatalf("beyond the ceiling: %v, want ErrClockJump", err)
	}
	f.is.Fenced(worker.ErrClosed)
	if got := f.is.LastUsed(); got != p.UnixMs {
		t.Fatalf("LastUsed = %d, want %d (the last issued ms)", got, p.UnixMs)
	}
	if n := f.logs.FilterLevelExact(zapcore.WarnLevel).Len(); n != 0 {
		t.Fatalf("clean shutdown logged %d warnings", n)
	}
	if st := f.is.SnowflakeState(); st.State != "fenced" {
		t.Fatalf("state after fencing: %+v", st)
	}
}

// TestSnowflakeStateAndRetryHints: starting (slot mark ahead), jump, and
// the retry hints computed from the error's own readings.
func TestSnowflakeStateAndRetryHints(t *testing.T) {
	f := newIssuer(t, nil)
	if _, err := f.is.CreateBiz(context.Background(), segment.Biz{Name: "b", Channel: segment.ChannelSnowflake}); err != nil {
		t.Fatal(err)
	}
	if st := f.is.SnowflakeState(); st.State != "starting" {
		t.Fatalf("before any slot: %+v", st)
	}
	f.is.Acquired(worker.Slot{Node: 2, Worker: 2, NotBefore: t0.UnixMilli() + 2000, HighWater: t0.UnixMilli() + 10_000})
	st := f.is.SnowflakeState()
	if st.State != "starting" || st.RetryAfter != 2001*time.Millisecond {
		t.Fatalf("waiting past the mark: %+v", st)
	}
	_, err := f.is.Next(context.Background(), Request{Biz: "b", Channel: chp(segment.ChannelSnowflake), Count: 1})
	if !Refusal(err) || f.is.RetryAfter(err) != 2001*time.Millisecond {
		t.Fatalf("waiting: %v (retry %v), want a refusal with 2001ms", err, f.is.RetryAfter(err))
	}
	f.clk.Add(20 * time.Second)
	if st := f.is.SnowflakeState(); st.State != "clock_jump" {
		t.Fatalf("past the ceiling: %+v", st)
	}
	_, err = f.is.Next(context.Background(), Request{Biz: "b", Channel: chp(segment.ChannelSnowflake), Count: 1})
	if !Refusal(err) || f.is.RetryAfter(err) != JumpRetryAfter {
		t.Fatalf("jump: %v (retry %v)", err, f.is.RetryAfter(err))
	}
	f.is.Extended(t0.UnixMilli() + 60_000)
	if st := f.is.SnowflakeState(); st.State != "serving" {
		t.Fatalf("after Extended: %+v", st)
	}
	// A business with fallback is served from its segment while refused.
	f.clk.Add(time.Hour)
	resp, err := f.is.Next(context.Background(), Request{Biz: "fb", Count: 3})
	if err != nil || !resp.Fallback || resp.Ranges[0].Last >= f.floor {
		t.Fatalf("fallback: %+v %v", resp, err)
	}
}
