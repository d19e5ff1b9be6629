package zkown

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/idgen/idgen/ordered"
)

const (
	testLease  = 3 * time.Second
	testMargin = testLease/20 + 5*time.Millisecond
	testTick   = testLease / 6
)

// event is one handler call, in the order of a journal shared by the
// nodes of a test.
type event struct {
	node  string
	kind  string // acquire, acquire-failed, release, lost
	shard int
	grant ordered.Grant
	at    time.Time // the clock at the call
}

type journal struct {
	mu  sync.Mutex
	evs []event
}

func (j *journal) add(e event) {
	j.mu.Lock()
	j.evs = append(j.evs, e)
	j.mu.Unlock()
}

func (j *journal) all() []event {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]event(nil), j.evs...)
}

// since returns the events from index i on.
func (j *journal) since(i int) []event {
	j.mu.Lock()
	defer j.mu.Unlock()
	return append([]event(nil), j.evs[i:]...)
}

func (j *journal) len() int {
	j.mu.Lock()
	defer j.mu.Unlock()
	return len(j.evs)
}

func filter(evs []event, node, kind string) []event {
	var out []event
	for _, e := range evs {
		if (node == "" || e.node == node) && (kind == "" || e.kind == kind) {
			out = append(out, e)
		}
	}
	return out
}

// recorder is an ordered.Handler that records its calls.
type recorder struct {
	name  string
	clock ordered.Clock
	j     *journal

	mu         sync.Mutex
	held       map[int]ordered.Grant
	acquireErr func(g ordered.Grant) error
	onRelease  func(s int)
	// releaseErr, when set, is what Release returns: ErrHandOffDeferred
	// keeps the shard held (nothing changed), any other error is a
	// release that stopped serving.
	releaseErr func(s int) error
}

func newRecorder(name string, clock ordered.Clock, j *journal) *recorder {
	return &recorder{name: name, clock: clock, j: j, held: map[int]ordered.Grant{}}
}

func (r *recorder) Acquire(ctx context.Context, g ordered.Grant) error {
	r.mu.Lock()
	f := r.acquireErr
	r.mu.Unlock()
	if f != nil {
		if err := f(g); err != nil {
			r.j.add(event{node: r.name, kind: "acquire-failed", shard: g.Shard, grant: g, at: r.clock.Now()})
			return err
		}
	}
	r.mu.Lock()
	r.held[g.Shard] = g
	r.mu.Unlock()
	r.j.add(event{node: r.name, kind: "acquire", shard: g.Shard, grant: g, at: r.clock.Now()})
	return nil
}

func (r *recorder) Release(ctx context.Context, s int) error {
	r.mu.Lock()
	f := r.onRelease
	r.mu.Unlock()
	if f != nil {
		f(s)
	}
	var err error
	r.mu.Lock()
	if r.releaseErr != nil {
		err = r.releaseErr(s)
	}
	if errors.Is(err, ordered.ErrHandOffDeferred) {
		r.mu.Unlock()
		return err
	}
	delete(r.held, s)
	r.mu.Unlock()
	r.j.add(event{node: r.name, kind: "release", shard: s, at: r.clock.Now()})
	return err
}

func (r *recorder) Lost(s int) {
	r.mu.Lock()
	delete(r.held, s)
	r.mu.Unlock()
	r.j.add(event{node: r.name, kind: "lost", shard: s, at: r.clock.Now()})
}

func (r *recorder) heldShards() map[int]ordered.Grant {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[int]ordered.Grant, len(r.held))
	for k, v := range r.held {
		out[k] = v
	}
	return out
}

// world is the fake ZooKeeper, clock and journal nodes of a test share.
type world struct {
	t   *testing.T
	fz  *fakeZK
	clk *fakeClock
	j   *journal
}

func newWorld(t *testing.T) *world {
	return &world{t: t, fz: newFakeZK(), clk: newFakeClock(), j: &journal{}}
}

// tnode is one coordinator of a unit test, stepped by hand: no goroutine
// runs unless the test starts one.
type tnode struct {
	w    *world
	c    *Coordinator
	conn *fakeConn
	h    *recorder
	self string
}

func (w *world) config(self string) Config {
	return Config{Root: "/idgen-test", Cluster: "unit", Self: self, Lease: testLease, Clock: w.clk,
		Logger: zaptest.NewLogger(w.t, zaptest.Level(zap.ErrorLevel)).Named(self), Timeout: 2 * time.Second, Version: "test"}
}

func (w *world) node(self string, mod func(*Config)) *tnode {
	w.t.Helper()
	return w.nodeWith(self, mod, func(r *recorder) ordered.Handler { return r })
}

// nodeWith is node with the handler handler(recorder) (a recorder or a
// wrapper of it).
func (w *world) nodeWith(self string, mod func(*Config), handler func(*recorder) ordered.Handler) *tnode {
	w.t.Helper()
	cfg := w.config(self)
	if mod != nil {
		mod(&cfg)
	}
	conn := w.fz.connect()
	c, err := newCoordinator(context.Background(), cfg, conn)
	if err != nil {
		w.t.Fatal(err)
	}
	h := newRecorder(self, w.clk, w.j)
	if err := c.attach(handler(h)); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() { abandon(c) })
	return &tnode{w: w, c: c, conn: conn, h: h, self: self}
}

// abandon stops the watch goroutines of a coordinator the test does not
// close.
func abandon(c *Coordinator) {
	c.mu.Lock()
	closed := c.closed
	c.closed = true
	c.mu.Unlock()
	if !closed {
		close(c.stopAll)
	}
}

// step is one renewal (and one in the store, when the handler holds
// leases) and one round, as the loops would run them.
func (n *tnode) step() {
	n.c.renew(context.Background())
	n.c.storeRenew(context.Background())
	n.c.round(context.Background())
}

func (n *tnode) held() []int {
	n.c.mu.Lock()
	defer n.c.mu.Unlock()
	out := make([]int, 0, len(n.c.held))
	for s := range n.c.held {
		out = append(out, s)
	}
	sort.Ints(out)
	return out
}

// shard reads shards/NN from the fake.
func (w *world) shard(s int) shardRecord {
	w.t.Helper()
	data, _, ok := w.fz.Get(fmt.Sprintf("/idgen-test/unit/ordered/shards/%02d", s))
	if !ok {
		w.t.Fatalf("shard %d: no znode", s)
	}
	var r shardRecord
	if err := json.Unmarshal(data, &r); err != nil {
		w.t.Fatal(err)
	}
	return r
}

// stepAll advances the clock by d, then steps the nodes in order.
func (w *world) stepAll(d time.Duration, nodes ...*tnode) {
	w.clk.Add(d)
	for _, n := range nodes {
		n.step()
	}
}

// checkAssignment fails unless every shard is held by exactly one of the
// nodes (coordinator and handler agreeing, and the znode naming it), and
// returns the holder of each shard.
func checkAssignment(t *testing.T, w *world, nodes ...*tnode) map[int]*tnode {
	t.Helper()
	owner := map[int]*tnode{}
	for _, n := range nodes {
		hs := n.h.heldShards()
		cs := n.held()
		if len(hs) != len(cs) {
			t.Fatalf("%s: coordinator holds %v, handler %d shards", n.self, cs, len(hs))
		}
		for _, s := range cs {
			if o, ok := owner[s]; ok {
				t.Fatalf("shard %d held by %s and %s", s, o.self, n.self)
			}
			owner[s] = n
			g, ok := hs[s]
			if !ok {
				t.Fatalf("%s: coordinator holds shard %d, handler does not", n.self, s)
			}
			r := w.shard(s)
			if r.Owner != n.c.ID() || r.State != StateOwned || r.Epoch != g.Epoch {
				t.Fatalf("shard %d: znode %+v, held by %s at epoch %d", s, r, n.c.ID(), g.Epoch)
			}
		}
	}
	if len(owner) != Shards {
		t.Fatalf("%d shards held, want %d", len(owner), Shards)
	}
	return owner
}

// settle steps the nodes every tick until every shard is held by its
// rendezvous owner among them (or fails after maxRounds).
func settle(t *testing.T, w *world, maxRounds int, nodes ...*tnode) map[int]*tnode {
	t.Helper()
	addrs := make([]string, len(nodes))
	for i, n := range nodes {
		addrs[i] = n.self
	}
	for range maxRounds {
		w.stepAll(testTick, nodes...)
		ok := true
		for _, n := range nodes {
			held := map[int]bool{}
			for _, s := range n.held() {
				held[s] = true
			}
			for s := range Shards {
				if (DesiredOwner(addrs, s) == n.self) != held[s] {
					ok = false
				}
			}
		}
		if ok {
			return checkAssignment(t, w, nodes...)
		}
	}
	t.Fatalf("no settled assignment after %d rounds", maxRounds)
	return nil
}

// checkEpochs fails unless each shard's grants (in journal order) have
// strictly increasing epochs, the last not above the znode's.
func checkEpochs(t *testing.T, w *world) {
	t.Helper()
	last := map[int]int64{}
	for _, e := range w.j.all() {
		if e.kind != "acquire" && e.kind != "acquire-failed" {
			continue
		}
		if e.grant.Epoch <= last[e.shard] {
			t.Fatalf("shard %d: grant of epoch %d to %s after epoch %d", e.shard, e.grant.Epoch, e.node, last[e.shard])
		}
		last[e.shard] = e.grant.Epoch
	}
	for s, e := range last {
		if r := w.shard(s); r.Epoch < e {
			t.Fatalf("shard %d: znode epoch %d below granted %d", s, r.Epoch, e)
		}
	}
}
