package ordered

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idgen/idgen/clock/clocktest"
	"github.com/idgen/idgen/segment"
)

// fakeStore is an in-memory Store with the epoch rules of the real ones.
type fakeStore struct {
	mu       sync.Mutex
	epochs   map[int]int64
	owners   map[int]string
	rows     map[Key]int64
	reqs     map[RequestKey]Request
	persists int   // parts committed
	calls    int   // PersistShards calls that reached the data (group commits)
	noFence  bool  // the negative control: persists ignore the epoch
	failNext error // the next Persist fails with it
	delay    time.Duration
	jitter   bool // persists sleep 0..2 ms first: concurrent ones commit out of order
	// hold, when set, makes every Persist wait for a value (or its close)
	// before it runs: a test queues requests behind a persist in flight.
	hold chan struct{}
	// onSession, when set, runs in WriteBackGated where the real store's
	// session reaches its server (and a new connection reports a server
	// change), before the check: a test makes the failover happen there.
	onSession func()
}

func newFakeStore() *fakeStore {
	return &fakeStore{epochs: map[int]int64{}, owners: map[int]string{}, rows: map[Key]int64{}, reqs: map[RequestKey]Request{}}
}

func (s *fakeStore) Claim(_ context.Context, shard int, epoch int64, owner string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	stored, claimed := s.epochs[shard]
	if stored > epoch || (claimed && stored == epoch && s.owners[shard] != owner) {
		return &FencedError{Shard: shard, Epoch: epoch, Stored: stored}
	}
	s.epochs[shard], s.owners[shard] = epoch, owner
	return nil
}

func (s *fakeStore) Load(_ context.Context, shard int, epoch int64, keys []Key) (map[Key]int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.epochs[shard] != epoch {
		return nil, ErrFenced
	}
	out := map[Key]int64{}
	for _, k := range keys {
		if v, ok := s.rows[k]; ok {
			out[k] = v
		}
	}
	return out, nil
}

func (s *fakeStore) Persist(ctx context.Context, shard int, epoch int64, rows []Row, reqs []Request) error {
	return PersistOne(ctx, s, shard, epoch, rows, reqs)
}

// PersistShards commits the parts that pass their epoch and request id
// checks, as the real stores do; failNext fails the whole call.
func (s *fakeStore) PersistShards(_ context.Context, parts []ShardWrite) ([]error, error) {
	if s.hold != nil {
		<-s.hold
	}
	// The input checks of every real store: a batch they refuse, this
	// store refuses.
	errs, err := ValidateShardWrites(parts)
	if err != nil {
		return nil, err
	}
	if s.delay > 0 {
		time.Sleep(s.delay)
	}
	if s.jitter {
		time.Sleep(time.Duration(rand.IntN(2000)) * time.Microsecond)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.failNext; err != nil {
		s.failNext = nil
		return nil, err
	}
	s.calls++
	for i, p := range parts {
		if errs[i] == nil {
			errs[i] = s.persistLocked(p)
		}
	}
	return errs, nil
}

func (s *fakeStore) persistLocked(p ShardWrite) error {
	if !s.noFence && s.epochs[p.Shard] != p.Epoch {
		return ErrFenced
	}
	var dup []RequestKey
	for _, r := range p.Reqs {
		if _, ok := s.reqs[r.key()]; ok {
			dup = append(dup, r.key())
		}
	}
	if len(dup) > 0 {
		return &DuplicateRequestsError{Requests: dup}
	}
	for _, r := range p.Rows {
		if segment.Shard(r.SubKey) != p.Shard {
			return errors.New("row of another shard")
		}
	}
	for _, r := range p.Reqs {
		s.reqs[r.key()] = r
	}
	for _, r := range p.Rows {
		s.rows[r.Key] = max(s.rows[r.Key], r.Num)
	}
	s.persists++
	return nil
}

func (s *fakeStore) WriteBack(_ context.Context, shard int, epoch int64, rows []Row) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.noFence && s.epochs[shard] != epoch {
		return ErrFenced
	}
	for _, r := range rows {
		s.rows[r.Key] = r.Num
	}
	return nil
}

// WriteBackGated implements GatedWriteBacker: onSession, then check,
// then WriteBack.
func (s *fakeStore) WriteBackGated(ctx context.Context, shard int, epoch int64, rows []Row, check func() error) error {
	if s.onSession != nil {
		s.onSession()
	}
	if check != nil {
		if err := check(); err != nil {
			return err
		}
	}
	return s.WriteBack(ctx, shard, epoch, rows)
}

func (s *fakeStore) LookupRequests(_ context.Context, biz, scope string, ids []string) (map[string]Request, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]Request{}
	for _, id := range ids {
		if r, ok := s.reqs[RequestKey{Biz: biz, Scope: scope, ID: id}]; ok {
			out[id] = r
		}
	}
	return out, nil
}

func (s *fakeStore) row(k Key) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rows[k]
}

// fakeClock is the project's settable clock.
type fakeClock = clocktest.Fake

func newFakeClock() *fakeClock { return clocktest.New(time.Unix(1_000_000, 0)) }

// fakeCoord is a Coordinator driven by the test.
type fakeCoord struct {
	self       string
	validUntil atomic.Pointer[time.Time]
	// validUntilWall, when set, is the lease's end on the wall clock
	// (else the same as validUntil).
	validUntilWall atomic.Pointer[time.Time]
	fenced         atomic.Int64 // Fenced calls
}

func newFakeCoord(self string, until time.Time) *fakeCoord {
	c := &fakeCoord{self: self}
	c.validUntil.Store(&until)
	return c
}

func (c *fakeCoord) Start(context.Context, Handler) error { return nil }
func (c *fakeCoord) Owner(shard int) Owner                { return Owner{Shard: shard, Addr: "other:1", Epoch: 0} }
func (c *fakeCoord) ValidUntil() time.Time                { return *c.validUntil.Load() }
func (c *fakeCoord) ValidUntilWall() time.Time {
	if w := c.validUntilWall.Load(); w != nil {
		return *w
	}
	return *c.validUntil.Load()
}
func (c *fakeCoord) Close(context.Context) error   { return nil }
func (c *fakeCoord) Fenced(shard int, epoch int64) { c.fenced.Add(1) }
func (c *fakeCoord) setValidUntil(t time.Time)     { c.validUntil.Store(&t) }

// node is one allocator over a shared store, as one process.
type node struct {
	a     *Allocator
	coord *fakeCoord
}

func newNode(t *testing.T, store Store, clk *fakeClock, self string) *node {
	t.Helper()
	coord := newFakeCoord(self, clk.Now().Add(time.Hour))
	a, err := New(Config{Store: store, Coordinator: coord, Clock: clk, Self: self})
	if err != nil {
		t.Fatal(err)
	}
	return &node{a: a, coord: coord}
}

// acquire grants every shard at epoch with no lease wait.
func (n *node) acquireAll(t *testing.T, epoch int64, notBefore time.Time) {
	t.Helper()
	for s := range segment.OrderedShards {
		if err := n.a.Acquire(context.Background(), Grant{Shard: s, Epoch: epoch, NotBefore: notBefore}); err != nil {
			t.Fatal(err)
		}
	}
}
