// Package orderedtest is the in-memory ordered.LeaseStore of the unit
// tests: the epoch, row, request id and lease rules of the real stores
// (ordered/mysqlstore, ordered/boltstore), checked by the same
// conformance suite (ordered/storetest's Run and RunLease), so a test
// that passes on it relies on nothing a real store does not do. Its fault
// knobs are small and explicit: SetUnreachable, Snapshot and Restore (a
// lossy failover), and Options.UnsafeNoFence (a negative control).
//
// Package ordered's own tests cannot import it (it imports ordered): the
// tests that need a LeaseStore live in its external test package.
//
// The simulator's database (sim/db.go) holds its ORDERED rows in one too,
// and keeps what is the simulator's around each call: fence rows held
// across a simulated node's pause, certification conflicts and db faults
// at the commit, a failover that rolls the segment store back with it.
package orderedtest

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"

	"github.com/idgen/idgen/ordered"
	"github.com/idgen/idgen/segment"
)

// ErrUnreachable is what every call gets while the store is unreachable
// (SetUnreachable): a lost connection, retryable as the real stores'.
var ErrUnreachable = fmt.Errorf("orderedtest: store unreachable: %w", segment.ErrUnavailable)

// shardRow is one shard's fence row: its epoch, the owner that claimed
// it and the lease nonce ("" when cleared or never claimed).
type shardRow struct {
	claimed bool
	epoch   int64
	owner   string
	nonce   string
}

// Store is an in-memory ordered.LeaseStore. The zero value is not usable:
// call New. Every method is one atomic operation under one mutex, so a
// Claim trivially waits for persists in flight.
type Store struct {
	mu     sync.Mutex
	shards [segment.OrderedShards]shardRow
	rows   map[ordered.Key]int64
	reqs   map[ordered.RequestKey]ordered.Request
	// nonces counts the nonces drawn. A Restore does not roll it back,
	// so a nonce is never drawn twice: the real stores' nonces are
	// random for the same reason (ordered.LeaseStore).
	nonces int
	down   bool
	opts   Options
}

var _ ordered.LeaseStore = (*Store)(nil)

// Options are NewWith's settings; the zero value (New) is the store of
// the unit tests.
type Options struct {
	// NewNonce draws a lease nonce, called with the store's lock held; it
	// must never return one it returned before. Default: a counter
	// ("nonce-1", ...). The simulator draws them from its run's seed.
	NewNonce func() string
	// UnsafeNoFence makes persists and write-backs ignore the shard's
	// epoch (claims and loads keep it): the negative control of a check
	// that fencing keeps numbers unique. Never set it elsewhere.
	UnsafeNoFence bool
}

// New returns an empty store.
func New() *Store { return NewWith(Options{}) }

// NewWith returns an empty store with opts.
func NewWith(opts Options) *Store {
	return &Store{rows: map[ordered.Key]int64{}, reqs: map[ordered.RequestKey]ordered.Request{}, opts: opts}
}

// SetUnreachable makes every call fail with ErrUnreachable (changing
// nothing) while down is true: the store cut off from the node.
func (s *Store) SetUnreachable(down bool) {
	s.mu.Lock()
	s.down = down
	s.mu.Unlock()
}

// Snapshot is what a replica holds at one moment (Store.Snapshot).
type Snapshot struct {
	shards [segment.OrderedShards]shardRow
	rows   map[ordered.Key]int64
	reqs   map[ordered.RequestKey]ordered.Request
}

// Snapshot returns the store's content now.
func (s *Store) Snapshot() *Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &Snapshot{shards: s.shards, rows: maps.Clone(s.rows), reqs: maps.Clone(s.reqs)}
}

// Restore puts the store back to snap: a lossy failover to a replica that
// had received only the writes before the snapshot (epochs, owners and
// nonces go back too). Nonces drawn after it are new ones.
func (s *Store) Restore(snap *Snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.shards, s.rows, s.reqs = snap.shards, maps.Clone(snap.rows), maps.Clone(snap.reqs)
}

// lock takes the store's mutex unless the store is unreachable or ctx is
// done; the caller unlocks.
func (s *Store) lock(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	if s.down {
		s.mu.Unlock()
		return ErrUnreachable
	}
	return nil
}

// newNonceLocked draws a nonce never drawn before.
func (s *Store) newNonceLocked() string {
	if s.opts.NewNonce != nil {
		return s.opts.NewNonce()
	}
	s.nonces++
	return fmt.Sprintf("nonce-%d", s.nonces)
}

// Claim implements ordered.Store; it writes a fresh lease nonce
// (ordered.LeaseStore).
func (s *Store) Claim(ctx context.Context, shard int, epoch int64, owner string) error {
	return s.claim(ctx, shard, epoch, owner, nil)
}

// ClaimObserved implements ordered.LeaseStore: Claim, refused with
// ordered.ErrLeaseRenewed (nothing changed) when the stored nonce is not
// observed, unless the row is at epoch and owner already (a retry of a
// claim whose answer was lost: its own nonce is there). The fencing rules
// come first.
func (s *Store) ClaimObserved(ctx context.Context, shard int, epoch int64, owner, observed string) error {
	return s.claim(ctx, shard, epoch, owner, &observed)
}

func (s *Store) claim(ctx context.Context, shard int, epoch int64, owner string, observed *string) error {
	if err := ordered.ValidateShard(shard); err != nil {
		return err
	}
	if epoch < 0 {
		return fmt.Errorf("%w: orderedtest: claim of shard %d at negative epoch %d", segment.ErrInvalid, shard, epoch)
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	r := &s.shards[shard]
	if r.claimed && (r.epoch > epoch || (r.epoch == epoch && r.owner != owner)) {
		return &ordered.FencedError{Shard: shard, Epoch: epoch, Stored: r.epoch}
	}
	retry := r.claimed && r.epoch == epoch
	if observed != nil && !retry && r.nonce != *observed {
		return fmt.Errorf("orderedtest: shard %d holds lease nonce %q, not the %q observed: %w", shard, r.nonce, *observed, ordered.ErrLeaseRenewed)
	}
	*r = shardRow{claimed: true, epoch: epoch, owner: owner, nonce: s.newNonceLocked()}
	return nil
}

// fencedLocked reports whether the shard's stored epoch is not epoch.
func (s *Store) fencedLocked(shard int, epoch int64) bool {
	r := s.shards[shard]
	return !r.claimed || r.epoch != epoch
}

// writeFencedLocked is fencedLocked for a persist or a write-back, which
// UnsafeNoFence lets through.
func (s *Store) writeFencedLocked(shard int, epoch int64) bool {
	return !s.opts.UnsafeNoFence && s.fencedLocked(shard, epoch)
}

// Load implements ordered.Store.
func (s *Store) Load(ctx context.Context, shard int, epoch int64, keys []ordered.Key) (map[ordered.Key]int64, error) {
	if err := ordered.ValidateShard(shard); err != nil {
		return nil, err
	}
	for _, k := range keys {
		if err := ordered.ValidateKey(shard, k); err != nil {
			return nil, err
		}
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	if s.fencedLocked(shard, epoch) {
		return nil, ordered.ErrFenced
	}
	out := make(map[ordered.Key]int64, len(keys))
	for _, k := range keys {
		if v, ok := s.rows[k]; ok {
			out[k] = v
		}
	}
	return out, nil
}

// Persist implements ordered.Store with PersistShards.
func (s *Store) Persist(ctx context.Context, shard int, epoch int64, rows []ordered.Row, reqs []ordered.Request) error {
	return ordered.PersistOne(ctx, s, shard, epoch, rows, reqs)
}

// PersistShards implements ordered.Store: each part is checked alone (its
// input, its epoch, its request ids) and writes all or nothing; the
// others commit beside a refused one.
func (s *Store) PersistShards(ctx context.Context, parts []ordered.ShardWrite) ([]error, error) {
	errs, err := ordered.ValidateShardWrites(parts)
	if err != nil {
		return nil, err
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	for i, p := range parts {
		if errs[i] == nil {
			errs[i] = s.persistLocked(p)
		}
	}
	return errs, nil
}

func (s *Store) persistLocked(p ordered.ShardWrite) error {
	if s.writeFencedLocked(p.Shard, p.Epoch) {
		return ordered.ErrFenced
	}
	var dup []ordered.RequestKey
	for _, q := range p.Reqs {
		if k := requestKey(q); s.has(k) {
			dup = append(dup, k)
		}
	}
	if len(dup) > 0 {
		return &ordered.DuplicateRequestsError{Requests: dup}
	}
	for _, q := range p.Reqs {
		s.reqs[requestKey(q)] = q
	}
	for _, r := range p.Rows {
		s.rows[r.Key] = max(s.rows[r.Key], r.Num)
	}
	return nil
}

func (s *Store) has(k ordered.RequestKey) bool { _, ok := s.reqs[k]; return ok }

func requestKey(q ordered.Request) ordered.RequestKey {
	return ordered.RequestKey{Biz: q.Biz, Scope: q.Scope, ID: q.ID}
}

// WriteBack implements ordered.Store; it clears the shard's lease nonce
// (ordered.LeaseStore), also when there are no rows.
func (s *Store) WriteBack(ctx context.Context, shard int, epoch int64, rows []ordered.Row) error {
	if err := ordered.ValidatePersist(shard, rows, nil); err != nil {
		return err
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	if s.writeFencedLocked(shard, epoch) {
		return ordered.ErrFenced
	}
	for _, r := range rows {
		s.rows[r.Key] = r.Num
	}
	s.shards[shard].nonce = ""
	return nil
}

// LookupRequests implements ordered.Store.
func (s *Store) LookupRequests(ctx context.Context, biz, scope string, ids []string) (map[string]ordered.Request, error) {
	if err := segment.ValidateBizName(biz); err != nil {
		return nil, err
	}
	for _, id := range ids {
		if err := ordered.ValidateRequestID(scope, id); err != nil {
			return nil, err
		}
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := map[string]ordered.Request{}
	for _, id := range ids {
		if q, ok := s.reqs[ordered.RequestKey{Biz: biz, Scope: scope, ID: id}]; ok {
			out[id] = q
		}
	}
	return out, nil
}

// RenewLease implements ordered.LeaseStore: one fresh nonce into each
// given shard still at its epoch and owner whose lease is not cleared.
func (s *Store) RenewLease(ctx context.Context, owner string, shards []ordered.ShardEpoch) ([]int, error) {
	seen := make(map[int]bool, len(shards))
	for _, se := range shards {
		if err := ordered.ValidateShard(se.Shard); err != nil {
			return nil, err
		}
		if se.Epoch < 0 {
			return nil, fmt.Errorf("%w: orderedtest: RenewLease of shard %d at negative epoch %d", segment.ErrInvalid, se.Shard, se.Epoch)
		}
		if seen[se.Shard] {
			return nil, fmt.Errorf("%w: orderedtest: RenewLease of shard %d twice", segment.ErrInvalid, se.Shard)
		}
		seen[se.Shard] = true
	}
	if len(shards) == 0 {
		return nil, nil
	}
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	nonce := s.newNonceLocked()
	var renewed []int
	for _, se := range shards {
		// A cleared lease (a hand-off) is never set again.
		if r := &s.shards[se.Shard]; r.claimed && r.epoch == se.Epoch && r.owner == owner && r.nonce != "" {
			r.nonce = nonce
			renewed = append(renewed, se.Shard)
		}
	}
	slices.Sort(renewed)
	return renewed, nil
}

// LeaseNonces implements ordered.LeaseStore.
func (s *Store) LeaseNonces(ctx context.Context) ([]string, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	defer s.mu.Unlock()
	out := make([]string, segment.OrderedShards)
	for i, r := range s.shards {
		out[i] = r.nonce
	}
	return out, nil
}

// RaiseOrdered raises rows to the marks (never lowers one), unfenced: the
// replication barrier's repair on a new MySQL server
// (segment/mysqlstore.Store.RaiseOrdered).
func (s *Store) RaiseOrdered(ctx context.Context, marks []segment.OrderedMark) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	for _, m := range marks {
		k := ordered.Key{Biz: m.Biz, SubKey: m.SubKey}
		s.rows[k] = max(s.rows[k], m.Last)
	}
	return nil
}

// RestoreRequests stores the request ids the store lacks, leaving stored
// ones as they are: the barrier's other repair
// (segment/mysqlstore.Store.RestoreRequests).
func (s *Store) RestoreRequests(ctx context.Context, reqs []ordered.Request) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	for _, q := range reqs {
		if k := requestKey(q); !s.has(k) {
			s.reqs[k] = q
		}
	}
	return nil
}

// Epoch returns the shard's stored epoch and whether it was ever claimed,
// for a test's assertions: read through no rule, not even SetUnreachable.
func (s *Store) Epoch(shard int) (epoch int64, claimed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.shards[shard]
	return r.epoch, r.claimed
}
