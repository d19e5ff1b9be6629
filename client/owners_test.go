package client

import (
	"context"
	"errors"
	"net"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudwego/kitex/client/callopt"
	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"github.com/cloudwego/kitex/server"

	"github.com/idgen/idgen/internal/wait"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	"github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
	"github.com/idgen/idgen/segment"
)

// ownersNode is a fake node that also serves the owner map.
type ownersNode struct {
	*fakeNode
	owners func(ctx context.Context) (*idl.OrderedOwnersResponse, error)
	omu    sync.Mutex
	oreqs  []*idl.OrderedOwnersRequest
}

func (o *ownersNode) OrderedOwners(ctx context.Context, req *idl.OrderedOwnersRequest, _ ...callopt.Option) (*idl.OrderedOwnersResponse, error) {
	o.omu.Lock()
	cp := *req
	o.oreqs = append(o.oreqs, &cp)
	o.omu.Unlock()
	return o.owners(ctx)
}

func (o *ownersNode) ownersCalls() int {
	o.omu.Lock()
	defer o.omu.Unlock()
	return len(o.oreqs)
}

func ownersCalls(nodes ...*ownersNode) int {
	n := 0
	for _, o := range nodes {
		n += o.ownersCalls()
	}
	return n
}

// ownersOf answers a map: def owns every shard but those of shards.
func ownersOf(def string, shards map[int]string) func(context.Context) (*idl.OrderedOwnersResponse, error) {
	return func(context.Context) (*idl.OrderedOwnersResponse, error) {
		resp := &idl.OrderedOwnersResponse{}
		for s := 0; s < segment.OrderedShards; s++ {
			addr, ok := shards[s]
			if !ok {
				addr = def
			}
			resp.Owners = append(resp.Owners, &idl.ShardOwner{Shard: int32(s), Addr: addr, Epoch: 1})
		}
		return resp, nil
	}
}

// keysOfOtherShards returns n sub keys of distinct shards, none of them
// the shard of avoid.
func keysOfOtherShards(avoid string, n int) []string {
	used := map[int]bool{segment.Shard(avoid): true}
	var out []string
	for i := 0; len(out) < n; i++ {
		k := "key-" + strconv.Itoa(i)
		if s := segment.Shard(k); !used[s] {
			used[s] = true
			out = append(out, k)
		}
	}
	return out
}

// connClient is a client over conns (by address); dialled records every
// address the client dialled.
func connClient(t *testing.T, clk *fakeClock, cfg Config, conns map[string]Conn) (c *Client, dialled func() []string) {
	t.Helper()
	var mu sync.Mutex
	var dials []string
	for a := range conns {
		cfg.Addrs = append(cfg.Addrs, a)
	}
	sort.Strings(cfg.Addrs)
	cfg.Dial = func(addr string) (Conn, error) {
		mu.Lock()
		dials = append(dials, addr)
		mu.Unlock()
		conn, ok := conns[addr]
		if !ok {
			return nil, errors.New("dial of an unknown address " + addr)
		}
		return conn, nil
	}
	if clk != nil {
		cfg.Now, cfg.Sleep = clk.Now, clk.Sleep
	}
	c, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), dials...)
	}
}

func resetReqs(nodes ...*ownersNode) {
	for _, n := range nodes {
		n.mu.Lock()
		n.reqs = nil
		n.mu.Unlock()
	}
}

// TestOrderedFirstCallsToOwner: the calls made before the first owner map
// arrives wait for it and go to the owner, none through a forwarding node:
// several callers at once on a new client, each call's first attempt at the
// owner of its key.
func TestOrderedFirstCallsToOwner(t *testing.T) {
	var s seq
	const key = "tenant-7"
	ownersMap := ownersOf("a:1", map[int]string{segment.Shard(key): "b:1"})
	// The map is answered only once every caller has made its call: they
	// all start before any map exists.
	const callers = 8
	var started sync.WaitGroup
	started.Add(callers)
	owners := func(ctx context.Context) (*idl.OrderedOwnersResponse, error) {
		started.Wait()
		return ownersMap(ctx)
	}
	a := &ownersNode{fakeNode: &fakeNode{addr: "a:1", answer: s.serve}, owners: owners}
	b := &ownersNode{fakeNode: &fakeNode{addr: "b:1", answer: s.serve}, owners: owners}
	c, _ := connClient(t, newFakeClock(), Config{}, map[string]Conn{"a:1": a, "b:1": b})
	c.ords.firstWait = time.Hour // only the map's arrival releases the callers
	var wg sync.WaitGroup
	errs := make(chan error, callers)
	for i := 0; i < callers; i++ {
		wg.Go(func() {
			started.Done()
			if _, err := c.Ordered(context.Background(), "inv", key, 1); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if st := c.Stats(); st.OrderedToOwner != callers || st.OrderedElsewhere != 0 {
		t.Fatalf("stats %+v, want all %d first calls to the owner", st, callers)
	}
	if a.calls() != 0 || b.calls() != callers {
		t.Fatalf("NextIDs calls a %d b %d, want all %d at the owner b", a.calls(), b.calls(), callers)
	}
}

// TestOrderedFirstWaitEndsWithoutMap: a node without the owner map (an
// older server) or a closed client does not hold the first calls: they
// are routed as before.
func TestOrderedFirstWaitEndsWithoutMap(t *testing.T) {
	var s seq
	failing := func(context.Context) (*idl.OrderedOwnersResponse, error) { return nil, errors.New("unknown method") }
	a := &ownersNode{fakeNode: &fakeNode{addr: "a:1", answer: s.serve}, owners: failing}
	c, _ := connClient(t, newFakeClock(), Config{}, map[string]Conn{"a:1": a})
	c.ords.firstWait = time.Hour // only the end of the fetch releases the call
	if _, err := c.Ordered(context.Background(), "inv", "k", 1); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.OrderedToOwner != 0 || st.OrderedElsewhere != 1 || ownersCalls(a) == 0 {
		t.Fatalf("stats %+v, OrderedOwners calls %d: want the map asked for and the call routed elsewhere", st, ownersCalls(a))
	}

	// A client closed before its first ORDERED call: the wait ends too
	// (the call itself is refused with ErrClosed).
	c2, _ := connClient(t, newFakeClock(), Config{}, map[string]Conn{"a:1": a})
	c2.ords.firstWait = time.Hour
	c2.Close()
	c2.ords.touch(c2)
	c2.ords.awaitFirst(context.Background())
}

// TestOrderedOwnerFirst: the first ORDERED call fetches the map (with the
// token); when the map does not come within the first call's wait, that
// call is routed as before; later ones go
// straight to the owner of their sub key's shard. A shard whose owner is
// unknown to the client, or that has no owner, is routed as before, and
// the unknown address is never dialled.
func TestOrderedOwnerFirst(t *testing.T) {
	var s seq
	const key = "tenant-7"
	others := keysOfOtherShards(key, 2)
	unknown, ownerless := others[0], others[1]
	ownersMap := ownersOf("a:1", map[int]string{
		segment.Shard(key):       "b:1",
		segment.Shard(unknown):   "z:9",
		segment.Shard(ownerless): "",
	})
	// The map is held back until the first call is done: that call must
	// not wait for it longer than firstWait.
	release := make(chan struct{})
	owners := func(ctx context.Context) (*idl.OrderedOwnersResponse, error) {
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		return ownersMap(ctx)
	}
	a := &ownersNode{fakeNode: &fakeNode{addr: "a:1", answer: s.serve}, owners: owners}
	b := &ownersNode{fakeNode: &fakeNode{addr: "b:1", answer: s.serve}, owners: owners}
	cn := &ownersNode{fakeNode: &fakeNode{addr: "c:1", answer: s.serve}, owners: owners}
	c, dialled := connClient(t, newFakeClock(), Config{Token: "tok"}, map[string]Conn{"a:1": a, "b:1": b, "c:1": cn})
	c.ords.firstWait = time.Millisecond
	ctx := context.Background()

	// No map yet: the call does not wait for one past firstWait.
	if _, err := c.Ordered(ctx, "inv", key, 1); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.OrderedToOwner != 0 || st.OrderedElsewhere != 1 {
		t.Fatalf("stats %+v after the first call, want 0 to the owner, 1 elsewhere", st)
	}
	close(release)
	wait.For(t, 10*time.Second, "the owner map", func() bool { return c.ords.m.Load() != nil })
	for _, n := range []*ownersNode{a, b, cn} {
		n.omu.Lock()
		for _, r := range n.oreqs {
			if r.GetToken() != "tok" {
				t.Errorf("OrderedOwners request %+v without the token", r)
			}
		}
		n.omu.Unlock()
	}

	resetReqs(a, b, cn)
	for i := 0; i < 10; i++ {
		if _, err := c.Ordered(ctx, "inv", key, 2); err != nil {
			t.Fatal(err)
		}
	}
	res, err := c.Fetch(ctx, "inv", 1, WithSubKey(key), WithChannel(SlowOrdered))
	if err != nil || res.Addr != "b:1" {
		t.Fatalf("Fetch with the sub key: %+v %v, want an answer from b:1", res, err)
	}
	if a.calls() != 0 || b.calls() != 11 || cn.calls() != 0 {
		t.Fatalf("calls a %d b %d c %d, want all 11 at the owner b", a.calls(), b.calls(), cn.calls())
	}
	b.mu.Lock()
	ids := map[string]bool{}
	for _, r := range b.reqs {
		if r.RequestId == nil || *r.RequestId == "" {
			t.Fatalf("ORDERED request without a request_id: %+v", r)
		}
		ids[*r.RequestId] = true
	}
	b.mu.Unlock()
	if len(ids) != 11 {
		t.Fatalf("%d distinct request ids for 11 calls", len(ids))
	}
	if st := c.Stats(); st.OrderedToOwner != 11 || st.OrderedElsewhere != 1 || st.OrderedOwnerFallbacks != 0 {
		t.Fatalf("stats %+v, want 11 to the owner, 1 elsewhere", st)
	}

	// An owner the client does not know, and a shard without owner: the
	// normal order; nothing new is dialled.
	for _, k := range []string{unknown, ownerless} {
		if _, err := c.Ordered(ctx, "inv", k, 1); err != nil {
			t.Fatal(err)
		}
	}
	if st := c.Stats(); st.OrderedToOwner != 11 || st.OrderedElsewhere != 3 {
		t.Fatalf("stats %+v, want 11 to the owner, 3 elsewhere", st)
	}
	if d := dialled(); len(d) != 3 || strings.Contains(strings.Join(d, ","), "z:9") {
		t.Fatalf("dialled %v, want only the configured nodes", d)
	}
	// Calls without a sub key are not ORDERED: not counted.
	if _, err := c.Next(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if st := c.Stats(); st.OrderedToOwner+st.OrderedElsewhere != 14 {
		t.Fatalf("stats %+v count an UNORDERED call", st)
	}
}

// TestOrderedOwnerRefusalFallsBack: an owner that refuses with a retryable
// SEGMENT_UNAVAILABLE is failed over (same request_id), and the map is
// refreshed soon after, not a period later. While the owner is backed
// off, calls go elsewhere.
func TestOrderedOwnerRefusalFallsBack(t *testing.T) {
	var s seq
	const key = "tenant-7"
	owners := ownersOf("a:1", map[int]string{segment.Shard(key): "b:1"})
	a := &ownersNode{fakeNode: &fakeNode{addr: "a:1", answer: s.serve}, owners: owners}
	var refuse atomic.Bool
	b := &ownersNode{fakeNode: &fakeNode{addr: "b:1", answer: func(k int, req *idl.NextIDsRequest) (*idl.NextIDsResponse, error) {
		if refuse.Load() {
			return nil, &idl.IdgenError{Code: idl.ErrorCode_SEGMENT_UNAVAILABLE, Message: "not the owner any more", Retryable: true, RetryAfterMs: 500}
		}
		return s.serve(k, req)
	}}, owners: owners}
	c, _ := connClient(t, newFakeClock(), Config{}, map[string]Conn{"a:1": a, "b:1": b})
	c.ords.every, c.ords.soonDelay = time.Hour, time.Millisecond // only a refusal refreshes
	ctx := context.Background()

	if _, err := c.Ordered(ctx, "inv", key, 1); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the owner map", func() bool { return c.ords.m.Load() != nil })
	fetches := ownersCalls(a, b)
	resetReqs(a, b)
	refuse.Store(true)
	st0 := c.Stats() // the first call may or may not have seen the map

	if _, err := c.Ordered(ctx, "inv", key, 3); err != nil {
		t.Fatalf("the owner's refusal was not failed over: %v", err)
	}
	if b.calls() != 1 || a.calls() != 1 {
		t.Fatalf("calls a %d b %d, want the owner b then a", a.calls(), b.calls())
	}
	if id1, id2 := a.reqs[0].GetRequestId(), b.reqs[0].GetRequestId(); id1 == "" || id1 != id2 {
		t.Fatalf("request ids %q at the owner, %q on the fallback: want the same", id2, id1)
	}
	if st := c.Stats(); st.OrderedToOwner-st0.OrderedToOwner != 1 || st.OrderedOwnerFallbacks != 1 || st.OrderedElsewhere != st0.OrderedElsewhere {
		t.Fatalf("stats %+v (before %+v), want 1 more to the owner, 1 fallback", st, st0)
	}
	wait.For(t, 10*time.Second, "a refresh after the refusal", func() bool { return ownersCalls(a, b) > fetches })

	// The owner is backed off for its retry_after (the fake clock does not
	// move): the next call goes elsewhere.
	if _, err := c.Ordered(ctx, "inv", key, 1); err != nil {
		t.Fatal(err)
	}
	if b.calls() != 1 || a.calls() != 2 {
		t.Fatalf("calls a %d b %d, want the backed-off owner left alone", a.calls(), b.calls())
	}
	if st := c.Stats(); st.OrderedToOwner-st0.OrderedToOwner != 1 || st.OrderedElsewhere-st0.OrderedElsewhere != 1 {
		t.Fatalf("stats %+v (before %+v), want 1 more to the owner, 1 more elsewhere", st, st0)
	}
}

// TestOrderedNoOwnerMap: without a map (Conns without OrderedOwners, or
// servers that answer it with an error: not implemented yet) ORDERED
// calls are routed and failed over as before.
func TestOrderedNoOwnerMap(t *testing.T) {
	unimplemented := func(context.Context) (*idl.OrderedOwnersResponse, error) {
		return nil, errors.New("unknown method OrderedOwners")
	}
	for _, tc := range []struct {
		name  string
		conns func(a, b *fakeNode) map[string]Conn
	}{
		{"conn without the method", func(a, b *fakeNode) map[string]Conn {
			return map[string]Conn{"a:1": a, "b:1": b}
		}},
		{"server without the method", func(a, b *fakeNode) map[string]Conn {
			return map[string]Conn{"a:1": &ownersNode{fakeNode: a, owners: unimplemented}, "b:1": &ownersNode{fakeNode: b, owners: unimplemented}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s seq
			a := &fakeNode{addr: "a:1", answer: func(int, *idl.NextIDsRequest) (*idl.NextIDsResponse, error) { return nil, errRefused }}
			b := &fakeNode{addr: "b:1", answer: s.serve}
			conns := tc.conns(a, b)
			c, _ := connClient(t, newFakeClock(), Config{}, conns)
			c.ords.every = time.Millisecond
			for i := 0; i < 20; i++ {
				if _, err := c.Ordered(context.Background(), "inv", "k"+strconv.Itoa(i), 1); err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
			}
			if a.calls() != 1 || b.calls() != 20 {
				t.Fatalf("calls a %d b %d, want the refused node asked once", a.calls(), b.calls())
			}
			if on, ok := conns["b:1"].(*ownersNode); ok {
				wait.For(t, 10*time.Second, "a map request", func() bool { return on.ownersCalls()+conns["a:1"].(*ownersNode).ownersCalls() > 0 })
			}
			if c.ords.m.Load() != nil {
				t.Fatal("a map without a server that serves one")
			}
			if st := c.Stats(); st.OrderedToOwner != 0 || st.OrderedElsewhere != 20 || st.OrderedOwnerFallbacks != 0 {
				t.Fatalf("stats %+v, want 20 elsewhere", st)
			}
		})
	}
}

// refresherRunning reports whether the owner map refresher goroutine
// exists.
func refresherRunning() bool {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	return strings.Contains(string(buf), "(*Client).refreshOwners")
}

// TestOwnersRefresherIdlesAndStops: the map is refreshed only while
// ORDERED calls are made, and Close ends the refresher, also in the middle
// of a fetch that hangs.
func TestOwnersRefresherIdlesAndStops(t *testing.T) {
	var s seq
	var hang atomic.Bool
	owners := ownersOf("a:1", nil)
	a := &ownersNode{fakeNode: &fakeNode{addr: "a:1", answer: s.serve}}
	a.owners = func(ctx context.Context) (*idl.OrderedOwnersResponse, error) {
		if hang.Load() {
			<-ctx.Done()
			return nil, ctx.Err()
		}
		return owners(ctx)
	}
	c, _ := connClient(t, nil, Config{}, map[string]Conn{"a:1": a})
	c.ords.every = 5 * time.Millisecond
	c.ords.soonDelay = time.Millisecond
	ctx := context.Background()

	// Before any ORDERED call nothing runs.
	if _, err := c.Next(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(20 * time.Millisecond)
	if a.ownersCalls() != 0 || refresherRunning() {
		t.Fatalf("%d map requests before an ORDERED call", a.ownersCalls())
	}

	if _, err := c.Ordered(ctx, "inv", "k", 1); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "the owner map", func() bool { return c.ords.m.Load() != nil })
	// Idle: no ORDERED call, no refresh.
	time.Sleep(50 * time.Millisecond)
	if n := a.ownersCalls(); n != 1 {
		t.Fatalf("%d map requests while idle, want 1", n)
	}
	// Calls wake it.
	if _, err := c.Ordered(ctx, "inv", "k", 1); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "a refresh after the idle period", func() bool { return a.ownersCalls() >= 2 })
	// Busy: refreshed every period.
	for deadline := time.Now().Add(10 * time.Second); a.ownersCalls() < 5; {
		if time.Now().After(deadline) {
			t.Fatalf("%d map requests while busy", a.ownersCalls())
		}
		if _, err := c.Ordered(ctx, "inv", "k", 1); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}

	// Close during a hanging fetch.
	hang.Store(true)
	n := a.ownersCalls()
	if _, err := c.Ordered(ctx, "inv", "k", 1); err != nil {
		t.Fatal(err)
	}
	wait.For(t, 10*time.Second, "a hanging map request", func() bool { return a.ownersCalls() > n })
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	// Close waited for it (wg); the goroutine itself is gone a moment later
	// (as goleak, allow for the return after its deferred wg.Done).
	wait.For(t, 10*time.Second, "the refresher to exit", func() bool { return !refresherRunning() })
	n = a.ownersCalls()
	time.Sleep(20 * time.Millisecond)
	if a.ownersCalls() != n {
		t.Fatal("map requests after Close")
	}
	if _, err := c.Ordered(ctx, "inv", "k", 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Ordered after Close: %v", err)
	}
	if refresherRunning() {
		t.Fatal("a call after Close started the refresher")
	}
}

// kitexOwnersNode is a node behind a real Kitex server: owners nil is a
// server without OrderedOwners (the embedded nil interface panics, the
// server answers an error).
type kitexOwnersNode struct {
	idl.IDGenService
	s      *seq
	hits   atomic.Int32
	owners func() *idl.OrderedOwnersResponse
}

func (k *kitexOwnersNode) NextIDs(_ context.Context, req *idl.NextIDsRequest) (*idl.NextIDsResponse, error) {
	k.hits.Add(1)
	return k.s.serve(0, req)
}

func (k *kitexOwnersNode) OrderedOwners(ctx context.Context, req *idl.OrderedOwnersRequest) (*idl.OrderedOwnersResponse, error) {
	if k.owners == nil {
		return k.IDGenService.OrderedOwners(ctx, req)
	}
	return k.owners(), nil
}

func startKitexOwnersNode(t *testing.T, h *kitexOwnersNode) string {
	t.Helper()
	quietKitex()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	svr := idgenservice.NewServer(h, server.WithListener(ln),
		server.WithServerBasicInfo(&rpcinfo.EndpointBasicInfo{ServiceName: "idgen"}), server.WithExitWaitTime(0))
	done := make(chan error, 1)
	go func() { done <- svr.Run() }()
	t.Cleanup(func() {
		_ = svr.Stop()
		<-done
	})
	return ln.Addr().String()
}

// TestOrderedOwnerKitex: over the real transport the generated client's
// OrderedOwners is used and calls go to the owner; against servers that
// lack the method, ORDERED calls work as before.
func TestOrderedOwnerKitex(t *testing.T) {
	const key = "tenant-7"
	t.Run("owners served", func(t *testing.T) {
		var s seq
		var ownerAddr atomic.Value
		owners := func() *idl.OrderedOwnersResponse {
			resp, _ := ownersOf("", map[int]string{segment.Shard(key): ownerAddr.Load().(string)})(context.Background())
			return resp
		}
		a := &kitexOwnersNode{s: &s, owners: owners}
		b := &kitexOwnersNode{s: &s, owners: owners}
		addrA, addrB := startKitexOwnersNode(t, a), startKitexOwnersNode(t, b)
		ownerAddr.Store(addrB)
		c, err := New(Config{Addrs: []string{addrA, addrB}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx := context.Background()
		if _, err := c.Ordered(ctx, "inv", key, 1); err != nil {
			t.Fatal(err)
		}
		wait.For(t, 10*time.Second, "the owner map", func() bool { return c.ords.m.Load() != nil })
		a.hits.Store(0)
		b.hits.Store(0)
		st0 := c.Stats()
		for i := 0; i < 10; i++ {
			if _, err := c.Ordered(ctx, "inv", key, 1); err != nil {
				t.Fatal(err)
			}
		}
		if a.hits.Load() != 0 || b.hits.Load() != 10 {
			t.Fatalf("hits a %d b %d, want all at the owner", a.hits.Load(), b.hits.Load())
		}
		if st := c.Stats(); st.OrderedToOwner-st0.OrderedToOwner != 10 {
			t.Fatalf("stats %+v (before %+v), want 10 more to the owner", st, st0)
		}
	})
	t.Run("owners not implemented", func(t *testing.T) {
		var s seq
		a, b := &kitexOwnersNode{s: &s}, &kitexOwnersNode{s: &s}
		c, err := New(Config{Addrs: []string{startKitexOwnersNode(t, a), startKitexOwnersNode(t, b)}})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.ords.every = time.Millisecond
		for i := 0; i < 20; i++ {
			if _, err := c.Ordered(context.Background(), "inv", key, 1); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond)
		}
		if c.ords.m.Load() != nil {
			t.Fatal("a map from servers without OrderedOwners")
		}
		if st := c.Stats(); st.OrderedToOwner != 0 || st.OrderedElsewhere != 20 {
			t.Fatalf("stats %+v", st)
		}
	})
}
