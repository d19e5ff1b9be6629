package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client/callopt"
	"github.com/cloudwego/kitex/pkg/kerrors"
	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"github.com/cloudwego/kitex/server"

	idl "github.com/idgen/idgen/kitex_gen/idgen"
	"github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
)

// fakeNode is one node behind the Conn interface: answer decides each
// reply; every request is recorded.
type fakeNode struct {
	addr   string
	answer func(n int, req *idl.NextIDsRequest) (*idl.NextIDsResponse, error)
	mu     sync.Mutex
	reqs   []*idl.NextIDsRequest
}

func (f *fakeNode) NextIDs(_ context.Context, req *idl.NextIDsRequest, _ ...callopt.Option) (*idl.NextIDsResponse, error) {
	f.mu.Lock()
	cp := *req
	f.reqs = append(f.reqs, &cp)
	n := len(f.reqs)
	f.mu.Unlock()
	return f.answer(n, req)
}

func (f *fakeNode) calls() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.reqs)
}

// seq hands out contiguous ranges, as one segment would.
type seq struct{ next atomic.Int64 }

func (s *seq) serve(_ int, req *idl.NextIDsRequest) (*idl.NextIDsResponse, error) {
	n := int64(max(req.Count, 1))
	last := s.next.Add(n)
	ch := idl.Channel_UNORDERED
	if req.Channel != nil {
		ch = *req.Channel
	}
	return &idl.NextIDsResponse{Ranges: []*idl.IDRange{{First: last - n + 1, Last: last}}, Channel: ch, Count: n}, nil
}

// fakeClock is Config.Now and Config.Sleep: sleeping moves it forward and
// is recorded, no wall-clock waits.
type fakeClock struct {
	mu     sync.Mutex
	now    time.Time
	sleeps []time.Duration
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sleeps = append(c.sleeps, d)
	c.now = c.now.Add(d)
	return ctx.Err()
}

// newFakeClient returns a client over the fake nodes.
func newFakeClient(t *testing.T, clk *fakeClock, cfg Config, nodes ...*fakeNode) *Client {
	t.Helper()
	byAddr := map[string]*fakeNode{}
	for _, n := range nodes {
		cfg.Addrs = append(cfg.Addrs, n.addr)
		byAddr[n.addr] = n
	}
	cfg.Dial = func(addr string) (Conn, error) { return byAddr[addr], nil }
	if clk != nil {
		cfg.Now, cfg.Sleep = clk.Now, clk.Sleep
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

var (
	errRefused = kerrors.ErrGetConnection.WithCause(&net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
	errTimeout = kerrors.ErrRPCTimeout.WithCause(errors.New("timeout=1s"))
)

func retryableRefusal(ms int64) error {
	return &idl.IdgenError{Code: idl.ErrorCode_WORKER_UNAVAILABLE, Message: "starting", Retryable: true, RetryAfterMs: ms}
}

func TestFailover(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
	}{
		{"connection refused", errRefused},
		{"rpc timeout", errTimeout},
		{"connection reset", kerrors.ErrRemoteOrNetwork.WithCause(syscall.ECONNRESET)},
		{"retryable refusal", retryableRefusal(0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s seq
			bad := &fakeNode{addr: "a:1", answer: func(int, *idl.NextIDsRequest) (*idl.NextIDsResponse, error) { return nil, tc.err }}
			good := &fakeNode{addr: "b:1", answer: s.serve}
			c := newFakeClient(t, newFakeClock(), Config{}, bad, good)
			for i := 0; i < 10; i++ {
				if _, err := c.Next(context.Background(), "x"); err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
			}
			// The failed node is left alone for its back-off (the fake clock
			// does not move unless the client sleeps, and it never needs to).
			if bad.calls() != 1 || good.calls() != 10 {
				t.Fatalf("bad node asked %d times, good %d; want 1 and 10", bad.calls(), good.calls())
			}
		})
	}
}

// TestRetryAfterHonoured: a refusing node is not asked again before its
// retry_after_ms; with no other node the client waits exactly that long.
func TestRetryAfterHonoured(t *testing.T) {
	var s seq
	clk := newFakeClock()
	var askedAt []time.Time
	n := &fakeNode{addr: "a:1"}
	n.answer = func(k int, req *idl.NextIDsRequest) (*idl.NextIDsResponse, error) {
		askedAt = append(askedAt, clk.Now())
		if k == 1 {
			return nil, retryableRefusal(300)
		}
		return s.serve(k, req)
	}
	c := newFakeClient(t, clk, Config{}, n)
	if _, err := c.Next(context.Background(), "x"); err != nil {
		t.Fatal(err)
	}
	if len(askedAt) != 2 || askedAt[1].Sub(askedAt[0]) != 300*time.Millisecond {
		t.Fatalf("asked at %v, want twice 300ms apart", askedAt)
	}
	if len(clk.sleeps) != 1 || clk.sleeps[0] != 300*time.Millisecond {
		t.Fatalf("slept %v, want [300ms]", clk.sleeps)
	}
}

// TestRetryAfterTooLong: a wait past the call's deadline is not slept: the
// refusal comes back at once, still retryable with its hint.
func TestRetryAfterTooLong(t *testing.T) {
	clk := newFakeClock()
	n := &fakeNode{addr: "a:1", answer: func(int, *idl.NextIDsRequest) (*idl.NextIDsResponse, error) { return nil, retryableRefusal(60_000) }}
	c := newFakeClient(t, clk, Config{}, n)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := c.Next(ctx, "x")
	if again, after := Retryable(err); !again || after != time.Minute {
		t.Fatalf("Retryable(%v) = %v %v, want true 1m", err, again, after)
	}
	if n.calls() != 1 || len(clk.sleeps) != 0 {
		t.Fatalf("%d calls, sleeps %v", n.calls(), clk.sleeps)
	}
}

func TestNonRetryableReturnsAtOnce(t *testing.T) {
	bad := &fakeNode{addr: "a:1", answer: func(int, *idl.NextIDsRequest) (*idl.NextIDsResponse, error) {
		return nil, &idl.IdgenError{Code: idl.ErrorCode_UNKNOWN_BIZ, Message: "unknown business"}
	}}
	other := &fakeNode{addr: "b:1", answer: bad.answer}
	c := newFakeClient(t, newFakeClock(), Config{}, bad, other)
	_, err := c.Next(context.Background(), "x")
	var ie *idl.IdgenError
	if !errors.As(err, &ie) || ie.Code != idl.ErrorCode_UNKNOWN_BIZ {
		t.Fatalf("err = %v, want UNKNOWN_BIZ", err)
	}
	if !errors.Is(err, ErrUnknownBiz) || Code(err) != ErrUnknownBiz {
		t.Fatalf("err = %v: errors.Is(err, ErrUnknownBiz) false, Code %v", err, Code(err))
	}
	if bad.calls()+other.calls() != 1 {
		t.Fatalf("%d calls, want 1", bad.calls()+other.calls())
	}
	if again, _ := Retryable(err); again {
		t.Fatal("UNKNOWN_BIZ reported retryable")
	}
}

func TestRetryBudget(t *testing.T) {
	fail := func(int, *idl.NextIDsRequest) (*idl.NextIDsResponse, error) { return nil, errRefused }
	a, b := &fakeNode{addr: "a:1", answer: fail}, &fakeNode{addr: "b:1", answer: fail}
	clk := newFakeClock()
	c := newFakeClient(t, clk, Config{MaxAttempts: 5}, a, b)
	_, err := c.Next(context.Background(), "x")
	if !errors.Is(err, ErrRetryBudget) || !errors.Is(err, kerrors.ErrGetConnection) {
		t.Fatalf("err = %v, want the budget and the last transport error", err)
	}
	if got := a.calls() + b.calls(); got != 5 {
		t.Fatalf("%d attempts, want 5", got)
	}
	if again, _ := Retryable(err); !again {
		t.Fatal("a budget used up on refused connections is retryable later")
	}
	// The back-off of a node grows with its consecutive failures.
	for i := 1; i < len(clk.sleeps); i++ {
		if clk.sleeps[i] < clk.sleeps[i-1] {
			t.Fatalf("back-off shrank: %v", clk.sleeps)
		}
	}
}

// TestContextBoundsCall: a cancelled context ends the retries.
func TestContextBoundsCall(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	n := &fakeNode{addr: "a:1"}
	n.answer = func(int, *idl.NextIDsRequest) (*idl.NextIDsResponse, error) { cancel(); return nil, errTimeout }
	c := newFakeClient(t, newFakeClock(), Config{MaxAttempts: 100}, n)
	_, err := c.Next(ctx, "x")
	if !errors.Is(err, context.Canceled) || n.calls() != 1 {
		t.Fatalf("err = %v after %d calls", err, n.calls())
	}
}

// TestOrderedKeepsRequestID: an ORDERED call carries a request_id, the
// same on every attempt; a given one is used as is.
func TestOrderedKeepsRequestID(t *testing.T) {
	var s seq
	lost := func(int, *idl.NextIDsRequest) (*idl.NextIDsResponse, error) { return nil, errTimeout }
	a := &fakeNode{addr: "a:1", answer: lost}
	b := &fakeNode{addr: "b:1", answer: func(k int, req *idl.NextIDsRequest) (*idl.NextIDsResponse, error) {
		if k == 1 {
			return nil, errRefused
		}
		return s.serve(k, req)
	}}
	c := newFakeClient(t, newFakeClock(), Config{}, a, b)
	for _, given := range []string{"", "mine-1"} {
		var opts []CallOption
		if given != "" {
			opts = append(opts, WithRequestID(given))
		}
		if _, err := c.Ordered(context.Background(), "inv", "k", 2, opts...); err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, n := range []*fakeNode{a, b} {
			n.mu.Lock()
			for _, r := range n.reqs {
				if r.RequestId == nil || r.GetSubKey() != "k" || r.Channel == nil || *r.Channel != idl.Channel_ORDERED {
					t.Fatalf("ORDERED request %+v", r)
				}
				ids = append(ids, *r.RequestId)
			}
			n.reqs = nil
			n.mu.Unlock()
		}
		if len(ids) < 2 {
			t.Fatalf("%d attempts, want a retry", len(ids))
		}
		for _, id := range ids {
			if id != ids[0] || id == "" || given != "" && id != given {
				t.Fatalf("request ids %v (given %q)", ids, given)
			}
		}
	}
	// SLOW_ORDERED is accepted, other channels are not.
	if _, err := c.Ordered(context.Background(), "inv", "k", 1, WithChannel(SlowOrdered)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Ordered(context.Background(), "inv", "k", 1, WithChannel(Snowflake)); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Ordered on SNOWFLAKE: %v", err)
	}
}

func TestRetryable(t *testing.T) {
	for _, tc := range []struct {
		err   error
		again bool
		after time.Duration
	}{
		{retryableRefusal(300), true, 300 * time.Millisecond},
		{&idl.IdgenError{Code: idl.ErrorCode_INVALID_ARGUMENT}, false, 0},
		{errRefused, true, transportPause},
		{errTimeout, true, transportPause},
		{fmt.Errorf("wrapped: %w", errRefused), true, transportPause},
		{&Error{Reason: ErrRetryBudget, Err: retryableRefusal(40)}, true, 40 * time.Millisecond},
		{ErrNoNodes, true, noNodesPause},
		{ErrClosed, false, 0},
		{ErrInvalid, false, 0},
		{context.Canceled, false, 0},
		{context.DeadlineExceeded, true, transportPause},
		{errors.New("something else"), false, 0},
	} {
		if again, after := Retryable(tc.err); again != tc.again || after != tc.after {
			t.Errorf("Retryable(%v) = %v %v, want %v %v", tc.err, again, after, tc.again, tc.after)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	for _, cfg := range []Config{
		{},
		{Addrs: []string{"a:1"}, ZK: []string{"z:2181"}},
		{Addrs: []string{"nohost"}},
		{Addrs: []string{"a:1"}, Prefetch: PrefetchConfig{Bizs: []PrefetchBiz{{Biz: "x", Channel: Ordered}}}},
		{Addrs: []string{"a:1"}, Prefetch: PrefetchConfig{Bizs: []PrefetchBiz{{Biz: "x"}, {Biz: "x"}}}},
	} {
		if _, err := New(cfg); !errors.Is(err, ErrInvalid) {
			t.Errorf("New(%+v) = %v, want ErrInvalid", cfg, err)
		}
	}
}

// kitexNode is a fake node behind a real Kitex server on a loopback port.
type kitexNode struct {
	idl.IDGenService
	s *seq
}

func (k *kitexNode) NextIDs(_ context.Context, req *idl.NextIDsRequest) (*idl.NextIDsResponse, error) {
	if k.s == nil {
		return nil, &idl.IdgenError{Code: idl.ErrorCode_RATE_LIMITED, Message: "over the rate", Retryable: true, RetryAfterMs: 1}
	}
	return k.s.serve(0, req)
}

// startKitexNode starts a node serving from s; with s nil it refuses every
// call with a retryable RATE_LIMITED.
func startKitexNode(t testing.TB, s *seq) (addr string, stop func()) {
	t.Helper()
	quietKitex()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	svr := idgenservice.NewServer(&kitexNode{s: s}, server.WithListener(ln),
		server.WithServerBasicInfo(&rpcinfo.EndpointBasicInfo{ServiceName: "idgen"}), server.WithExitWaitTime(0))
	done := make(chan error, 1)
	go func() { done <- svr.Run() }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			_ = svr.Stop()
			<-done
		})
	}
	t.Cleanup(stop)
	return ln.Addr().String(), stop
}

// TestFailoverKitex: over the real transport, a node that stops is failed
// over without a caller-visible error.
func TestFailoverKitex(t *testing.T) {
	var s seq
	a, stopA := startKitexNode(t, &s)
	b, _ := startKitexNode(t, &s)
	c, err := New(Config{Addrs: []string{a, b}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	seen := map[int64]bool{}
	for i := 0; i < 20; i++ {
		if i == 5 {
			stopA()
		}
		id, err := c.Next(ctx, "x")
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		if seen[id] {
			t.Fatalf("duplicate %d", id)
		}
		seen[id] = true
	}
}

// TestRefusalCodeKitex: a refusal that crossed the real transport (the
// IDL exception decoded by Kitex) is the sentinel of its code, also when
// the retry budget ran out on it, and Retryable still reads its hint.
func TestRefusalCodeKitex(t *testing.T) {
	a, _ := startKitexNode(t, nil)
	c, err := New(Config{Addrs: []string{a}, MaxAttempts: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_, err = c.Next(context.Background(), "x")
	if !errors.Is(err, ErrRateLimited) || Code(err) != ErrRateLimited {
		t.Fatalf("err = %v: Code %v, want RATE_LIMITED", err, Code(err))
	}
	if !errors.Is(err, ErrRetryBudget) || errors.Is(err, ErrWorkerUnavailable) {
		t.Fatalf("err = %v: want ErrRetryBudget and no other code", err)
	}
	if again, after := Retryable(err); !again || after != time.Millisecond {
		t.Fatalf("Retryable(%v) = %v %v, want true 1ms", err, again, after)
	}
}
