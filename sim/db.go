package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	clusterinc "github.com/idgen/idgen/cluster/incarnation"
	"github.com/idgen/idgen/ordered"
	"github.com/idgen/idgen/ordered/orderedtest"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/memstore"
	"github.com/idgen/idgen/segment/mysqlstore"
)

// db is the simulated MySQL primary: memstore for businesses and
// UNORDERED segments, and for the ORDERED shard owners the unit tests'
// in-memory ordered.LeaseStore (ordered/orderedtest: the epoch and lease
// rules of the real stores, conformance-tested), which nodeDB wraps in
// the simulator's transactions. A lossy failover puts both back to an
// older snapshot (what an asynchronous replica had) under a new server
// identity.
type db struct {
	mem *memstore.Store
	// ord holds the ORDERED shard rows, counters and request ids. Every
	// call into it is made with mu held, so a snapshot takes it and mem
	// at one moment.
	ord *orderedtest.Store

	mu sync.Mutex
	// rng draws the lease nonces (ordered_shard.lease_nonce); a failover
	// does not roll it back (a new nonce is never an old one come back).
	rng    *rand.Rand
	server int // the server identity (a failover changes it)
	// binding is the cluster the database belongs to (cluster_binding;
	// nil until the first node binds it).
	binding *mysqlstore.Binding
	// witness is the cluster incarnation's witness in cluster_binding
	// (zk_incarnation, zk_counter): what a node with no record of its own
	// compares ZooKeeper's marker with (cluster/incarnation.Witness).
	witness witnessState
	// conflicts is how many commits from now on are refused by a Galera
	// certification conflict (db-cert).
	conflicts atomic.Int64
	shardMus  [segment.OrderedShards]sync.Mutex // the shard's fence row
}

// newDB returns an empty database whose lease nonces are drawn from the
// run's seed. noFence is the no-fence control: persists and write-backs
// ignore the shard's epoch.
func newDB(seed uint64, noFence bool) *db {
	d := &db{mem: memstore.New(), rng: rand.New(rand.NewPCG(seed, 0xdb)), server: 1}
	d.ord = orderedtest.NewWith(orderedtest.Options{NewNonce: d.newNonce, UnsafeNoFence: noFence})
	return d
}

// newNonce draws a lease nonce (32 hex characters, as mysqlstore's, from
// the run's seed). Called by d.ord, with d.mu held.
func (d *db) newNonce() string {
	return fmt.Sprintf("%016x%016x", d.rng.Uint64(), d.rng.Uint64())
}

// dbSnapshot is what a replica holds at one moment.
type dbSnapshot struct {
	mem *memstore.Snapshot
	ord *orderedtest.Snapshot
	// binding is the database's cluster binding (a pointer to an
	// immutable value: it is written once).
	binding *mysqlstore.Binding
	witness witnessState
}

// witnessState is the incarnation witness's row.
type witnessState struct {
	id      string
	counter int64
}

func (d *db) snapshot() dbSnapshot {
	d.mu.Lock()
	defer d.mu.Unlock()
	return dbSnapshot{mem: d.mem.Snapshot(), ord: d.ord.Snapshot(), binding: d.binding, witness: d.witness}
}

// bindCluster is mysqlstore.Store.BindCluster on the simulated database:
// the first caller binds it (INSERT IGNORE), and every caller is judged by
// the real rule (mysqlstore.CheckBinding). A failover to a replica that
// has no binding yet lets the next node bind it again, as on MySQL.
func (d *db) bindCluster(cluster string, createdMs int64) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.binding == nil {
		d.binding = &mysqlstore.Binding{Cluster: cluster, CreatedMs: createdMs, BoundBy: "sim", BoundAt: time.Now()}
	}
	return mysqlstore.CheckBinding(*d.binding, cluster, createdMs, "idgen")
}

func (d *db) serverID() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.server
}

// commit is the COMMIT of a write whose statements ran: it fails while
// db-cert has conflicts left to hand out. A Galera certification conflict
// refuses the commit after every statement looked fine (error 1213) and
// rolls the transaction back whole, so the caller returns before applying
// anything. The real store tries such a transaction again up to 12 times
// (mysqlstore.retryConflicts, which the simulator does not run); what
// reaches the layers above, modelled here, is the error once those
// attempts are spent, or a slower success.
func (d *db) commit() error {
	for {
		n := d.conflicts.Load()
		if n <= 0 {
			return nil
		}
		if d.conflicts.CompareAndSwap(n, n-1) {
			return errCertConflict
		}
	}
}

// failover promotes a replica that holds only snap; it returns the new
// server's identity.
func (d *db) failover(snap dbSnapshot) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.mem.Restore(snap.mem)
	d.ord.Restore(snap.ord)
	d.binding = snap.binding
	d.witness = snap.witness
	d.server++
	return d.server
}

// switchover is a planned, lossless switchover: the replica that takes
// over holds every write, only the server identity changes (a node's next
// statement reports it, and the replication guard's barrier runs).
func (d *db) switchover() {
	d.mu.Lock()
	d.server++
	d.mu.Unlock()
}

// nodeDB is one node's connection to the db: every call waits out the
// node's pause and fails while the node is dead, so a paused node's
// statements stop where they are (holding the shard's fence row, if a
// persist was in flight).
type nodeDB struct {
	*memstore.Store
	d   *db
	n   *node
	inc int // the incarnation whose connection this is
	// onChange is told of a new server identity before the node's next
	// statement runs on it (mysqlstore.Store.OnServerChange).
	onChange func(old, new string)
	seenMu   sync.Mutex
	seen     int
	// calls counts the statements the node ran (every store call passes
	// boundary): a node refused at start must have run none.
	calls atomic.Int64
}

// Server is the identity of the server behind the node's newest
// connection (zkguard.Server).
func (s *nodeDB) Server() string {
	s.seenMu.Lock()
	defer s.seenMu.Unlock()
	if s.seen == 0 {
		return ""
	}
	return fmt.Sprintf("mysql-%d", s.seen)
}

// Ping makes the node notice a server change (zkguard.Server).
func (s *nodeDB) Ping(ctx context.Context) error { return s.boundary(ctx) }

// boundary is n.boundary plus the server change check: a statement after a
// failover reports the new server first, as a new MySQL connection does.
func (s *nodeDB) boundary(ctx context.Context) error {
	s.calls.Add(1)
	if err := s.n.boundary(ctx, s.inc); err != nil {
		return err
	}
	s.d.mu.Lock()
	cur := s.d.server
	s.d.mu.Unlock()
	s.seenMu.Lock()
	old := s.seen
	s.seen = cur
	s.seenMu.Unlock()
	if c := s.n.c; c != nil && old != cur {
		c.limits.statementOn(time.Now(), s.n.addr, s.inc, cur)
	}
	if old != 0 && old != cur && s.onChange != nil {
		s.onChange(fmt.Sprintf("mysql-%d", old), fmt.Sprintf("mysql-%d", cur))
	}
	return nil
}

// raiseOwned raises ORDERED rows to the marks (GREATEST): the barrier's
// repair on a new server (mysqlstore.Store.RaiseOrdered).
func (s *nodeDB) raiseOwned(ctx context.Context, marks []segment.OrderedMark) error {
	if err := s.boundary(ctx); err != nil {
		return err
	}
	if err := s.d.commit(); err != nil {
		return err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return s.d.ord.RaiseOrdered(context.WithoutCancel(ctx), marks)
}

// restoreRequests stores the request ids the db lacks, leaving stored
// ones as they are (mysqlstore.Store.RestoreRequests).
func (s *nodeDB) restoreRequests(ctx context.Context, reqs []ordered.Request) error {
	if err := s.boundary(ctx); err != nil {
		return err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return s.d.ord.RestoreRequests(context.WithoutCancel(ctx), reqs)
}

// RaiseSegment passes the boundary (segment.Raiser through memstore).
func (s *nodeDB) RaiseSegment(ctx context.Context, biz string, atLeast int64) error {
	if err := s.boundary(ctx); err != nil {
		return err
	}
	if err := s.d.commit(); err != nil {
		return err
	}
	return s.Store.RaiseSegment(ctx, biz, atLeast)
}

var (
	_ segment.Store            = (*nodeDB)(nil)
	_ ordered.LeaseStore       = (*nodeDB)(nil)
	_ ordered.GatedWriteBacker = (*nodeDB)(nil)
)

func (s *nodeDB) ReserveSegment(ctx context.Context, biz string, step int64) (segment.Range, error) {
	if err := s.boundary(ctx); err != nil {
		return segment.Range{}, err
	}
	if err := s.d.commit(); err != nil {
		return segment.Range{}, err
	}
	return s.Store.ReserveSegment(ctx, biz, step)
}

func (s *nodeDB) ReserveOrdered(ctx context.Context, req segment.OrderedRequest) (segment.Range, error) {
	if err := s.boundary(ctx); err != nil {
		return segment.Range{}, err
	}
	if err := s.d.commit(); err != nil {
		return segment.Range{}, err
	}
	return s.Store.ReserveOrdered(ctx, req)
}

func (s *nodeDB) ReserveOrderedReplay(ctx context.Context, req segment.OrderedRequest) (segment.Reservation, error) {
	if err := s.boundary(ctx); err != nil {
		return segment.Reservation{}, err
	}
	if err := s.d.commit(); err != nil {
		return segment.Reservation{}, err
	}
	return s.Store.ReserveOrderedReplay(ctx, req)
}

func (s *nodeDB) GetBiz(ctx context.Context, name string) (segment.Biz, error) {
	if err := s.boundary(ctx); err != nil {
		return segment.Biz{}, err
	}
	return s.Store.GetBiz(ctx, name)
}

// Close closes nothing: the db outlives the node.
func (s *nodeDB) Close() error { return nil }

// lockShard takes the shard's fence row, bounded by ctx (a lock wait
// timeout is ordered.ErrShardBusy, as in the MySQL store).
func (s *nodeDB) lockShard(ctx context.Context, shard int) (func(), error) {
	mu := &s.d.shardMus[shard]
	for !mu.TryLock() {
		select {
		case <-ctx.Done():
			return nil, ordered.ErrShardBusy
		case <-time.After(time.Millisecond):
		}
	}
	return mu.Unlock, nil
}

// Claim implements ordered.Store: a transaction on the shard's fence row.
func (s *nodeDB) Claim(ctx context.Context, shard int, epoch int64, owner string) error {
	return s.shardTx(ctx, shard, false, func(ctx context.Context, o *orderedtest.Store) error {
		return o.Claim(ctx, shard, epoch, owner)
	})
}

// ClaimObserved implements ordered.LeaseStore: a transaction on the
// shard's fence row.
func (s *nodeDB) ClaimObserved(ctx context.Context, shard int, epoch int64, owner, observed string) error {
	return s.shardTx(ctx, shard, false, func(ctx context.Context, o *orderedtest.Store) error {
		return o.ClaimObserved(ctx, shard, epoch, owner, observed)
	})
}

// RenewLease implements ordered.LeaseStore: one transaction over the
// shards' fence rows (ascending, as the real store's UPDATE takes them),
// one fresh nonce into each row still at the caller's epoch and owner.
// The node's pause is waited out before, not inside: the real renewal is
// one autocommit statement.
func (s *nodeDB) RenewLease(ctx context.Context, owner string, shards []ordered.ShardEpoch) ([]int, error) {
	if len(shards) == 0 {
		return nil, nil
	}
	ids := make([]int, len(shards))
	for i, se := range shards {
		ids[i] = se.Shard
	}
	slices.Sort(ids)
	// A shard twice would wait for its own fence row.
	if len(slices.Compact(slices.Clone(ids))) != len(ids) {
		return nil, fmt.Errorf("sim: RenewLease of %v: %w: a shard given twice", ids, segment.ErrInvalid)
	}
	var renewed []int
	err := s.shardsTx(ctx, ids, false, func(ctx context.Context, o *orderedtest.Store) error {
		var err error
		renewed, err = o.RenewLease(ctx, owner, shards)
		return err
	})
	if err != nil {
		return nil, err
	}
	return renewed, nil
}

// LeaseNonces implements ordered.LeaseStore: a read, like Load.
func (s *nodeDB) LeaseNonces(ctx context.Context) ([]string, error) {
	if err := s.boundary(ctx); err != nil {
		return nil, err
	}
	if err := s.d.mem.Enter(ctx); err != nil {
		return nil, err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return s.d.ord.LeaseNonces(context.WithoutCancel(ctx))
}

// shardTx runs fn as one transaction on the shard's fence row: the node's
// pause is waited out first (and, with pausedInside, again while holding
// the row: a client paused inside its transaction holds it, issue 29
// hole j), then the commit may be refused (db-cert), then fn runs on the
// ORDERED rows under the database's lock (its ctx is not cancelled: the
// statements ran), then a db-stall or db-fail hits its reply.
func (s *nodeDB) shardTx(ctx context.Context, shard int, pausedInside bool, fn func(ctx context.Context, o *orderedtest.Store) error) error {
	return s.shardsTx(ctx, []int{shard}, pausedInside, fn)
}

// shardsTx is shardTx on several shards' fence rows, taken in ascending
// order as the real store's fencing UPDATE takes them (by primary key).
func (s *nodeDB) shardsTx(ctx context.Context, shards []int, pausedInside bool, fn func(ctx context.Context, o *orderedtest.Store) error) error {
	return s.shardsTxChecked(ctx, shards, pausedInside, nil, fn)
}

// shardsTxChecked is shardsTx with check run once the transaction holds
// its rows, past the boundary (a server change reported, the node's
// pause waited out) and before the db's data is touched: the session's
// check of ordered.GatedWriteBacker.
func (s *nodeDB) shardsTxChecked(ctx context.Context, shards []int, pausedInside bool, check func() error, fn func(ctx context.Context, o *orderedtest.Store) error) error {
	for _, shard := range shards {
		if err := ordered.ValidateShard(shard); err != nil {
			return err // no fence row to take
		}
	}
	if err := s.boundary(ctx); err != nil {
		return err
	}
	shards = slices.Sorted(slices.Values(shards))
	for _, shard := range shards {
		unlock, err := s.lockShard(ctx, shard)
		if err != nil {
			return err // the rows taken so far are let go by their defers
		}
		defer unlock()
	}
	if pausedInside {
		if err := s.boundary(context.Background()); err != nil {
			return err
		}
	}
	if check != nil {
		if err := check(); err != nil {
			return err
		}
	}
	if err := s.d.commit(); err != nil {
		return err
	}
	s.d.mu.Lock()
	err := fn(context.WithoutCancel(ctx), s.d.ord)
	s.d.mu.Unlock()
	if err != nil {
		return err
	}
	// db-stall and db-fail reach the transaction after its commit, the
	// harder of their two cases: a hung commit that holds the fence rows,
	// and a commit whose reply is lost (the caller sees an error for what
	// is written). Before the commit, a failure is only a refusal.
	return s.d.mem.Enter(ctx)
}

// Load implements ordered.Store.
func (s *nodeDB) Load(ctx context.Context, shard int, epoch int64, keys []ordered.Key) (map[ordered.Key]int64, error) {
	if err := s.boundary(ctx); err != nil {
		return nil, err
	}
	if err := s.d.mem.Enter(ctx); err != nil {
		return nil, err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return s.d.ord.Load(context.WithoutCancel(ctx), shard, epoch, keys)
}

// Persist implements ordered.Store with PersistShards.
func (s *nodeDB) Persist(ctx context.Context, shard int, epoch int64, rows []ordered.Row, reqs []ordered.Request) error {
	return ordered.PersistOne(ctx, s, shard, epoch, rows, reqs)
}

// PersistShards implements ordered.Store: one transaction over the parts'
// fence rows. The rows are taken first and the node's pause is waited out
// while holding them: a client paused inside its transaction holds them
// (issue 29 hole j). Each part is checked alone (its epoch, its request
// ids): a refused part writes nothing, the others commit.
func (s *nodeDB) PersistShards(ctx context.Context, parts []ordered.ShardWrite) ([]error, error) {
	errs, err := ordered.ValidateShardWrites(parts)
	if err != nil {
		return nil, err
	}
	shards := make([]int, 0, len(parts))
	for i, p := range parts {
		if errs[i] == nil {
			shards = append(shards, p.Shard)
		}
	}
	err = s.shardsTx(ctx, shards, true, func(ctx context.Context, o *orderedtest.Store) error {
		var err error
		errs, err = o.PersistShards(ctx, parts)
		return err
	})
	if err != nil {
		return nil, err
	}
	return errs, nil
}

// WriteBack implements ordered.Store; it clears the shard's lease nonce
// (ordered.LeaseStore).
func (s *nodeDB) WriteBack(ctx context.Context, shard int, epoch int64, rows []ordered.Row) error {
	return s.shardTx(ctx, shard, false, func(ctx context.Context, o *orderedtest.Store) error {
		return o.WriteBack(ctx, shard, epoch, rows)
	})
}

// WriteBackGated implements ordered.GatedWriteBacker: check runs after
// the boundary, where a new MySQL session has reported a server change
// (and waited out the node's pause), as mysqlstore runs it on its session.
func (s *nodeDB) WriteBackGated(ctx context.Context, shard int, epoch int64, rows []ordered.Row, check func() error) error {
	return s.shardsTxChecked(ctx, []int{shard}, false, check, func(ctx context.Context, o *orderedtest.Store) error {
		return o.WriteBack(ctx, shard, epoch, rows)
	})
}

// LookupRequests implements ordered.Store.
func (s *nodeDB) LookupRequests(ctx context.Context, biz, scope string, ids []string) (map[string]ordered.Request, error) {
	if err := s.boundary(ctx); err != nil {
		return nil, err
	}
	if err := s.d.mem.Enter(ctx); err != nil {
		return nil, err
	}
	s.d.mu.Lock()
	defer s.d.mu.Unlock()
	return s.d.ord.LookupRequests(context.WithoutCancel(ctx), biz, scope, ids)
}

// errDead is what a killed node's boundary calls get.
var errDead = errors.New("sim: the node was killed")

// errCertConflict is what a write gets when a Galera certification
// conflict refused its commit (and the store's retries were spent):
// retryable, nothing stored.
var errCertConflict = fmt.Errorf("sim: deadlock, rolled back (a Galera certification conflict refused the commit): %w", segment.ErrUnavailable)

// errStoreDown wraps segment.ErrUnavailable for injected store failures.
var errStoreDown = fmt.Errorf("sim: store connection lost: %w", segment.ErrUnavailable)

// simWitness is the database as the cluster incarnation's witness, as the
// server wires it (server/incarnation.go, mysqlstore's cluster_binding
// row): it survives a ZooKeeper restore, and a lossy failover rolls it back
// like every other row.
type simWitness struct {
	s       *nodeDB
	cluster string
}

// Load implements incarnation.Witness.
func (w simWitness) Load(ctx context.Context) (clusterinc.WitnessState, error) {
	if err := w.s.boundary(ctx); err != nil {
		return clusterinc.WitnessState{}, err
	}
	d := w.s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.binding == nil || d.binding.Cluster != w.cluster {
		return clusterinc.WitnessState{}, nil
	}
	return clusterinc.WitnessState{Bound: true, ID: d.witness.id, Counter: d.witness.counter}, nil
}

// Raise implements incarnation.Witness.
func (w simWitness) Raise(ctx context.Context, id string, counter int64) error {
	if err := w.s.boundary(ctx); err != nil {
		return err
	}
	d := w.s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.binding == nil || d.binding.Cluster != w.cluster {
		return nil // not bound to this cluster: nothing recorded (the server's row has the cluster in its key)
	}
	if d.witness.id == "" {
		d.witness.id = id
	}
	d.witness.counter = max(d.witness.counter, counter)
	return nil
}
