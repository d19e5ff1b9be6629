// Package ordered serves the ORDERED channel at memory speed: each of the 64
// shards (segment.Shard of the sub key) has one owner at a time, and the
// owner allocates from memory, persisting to the store either before each
// answer (gapless, merged into group commits) or a reservation ahead
// (cached).
//
// Three rules keep every key strictly increasing across the cluster in real
// time, whichever node serves and whatever fails in between:
//
//  1. Fencing: every persist is conditional on the owner's epoch for the
//     shard (Store.Persist), and a new owner raises the epoch (Store.Claim)
//     before it reads a single counter. A deposed owner's write fails, so
//     a stale counter is never written back (TiDB #46444).
//  2. The lease wait: a new owner answers only after the old owner can no
//     longer answer (Grant.NotBefore), and an owner that cannot renew its
//     lease stops answering before the lease runs out (Grant.Valid). Every
//     answer is checked against the lease after its numbers are allocated,
//     so a pause between allocation and answer cannot leak a number below
//     one a new owner already answered.
//  3. A new owner starts above everything persisted: it loads each key
//     from the store under its own epoch, never from a map it kept from an
//     earlier term (TiDB #52600).
//
// Ownership (who owns which shard, epochs, leases) comes from a Coordinator:
// package ordered/zkown for ZooKeeper clusters, Local for a standalone node.
package ordered

import (
	"context"
	"errors"
	"fmt"

	"github.com/idgen/idgen/segment"
)

// Key is one ORDERED counter.
type Key struct {
	Biz, SubKey string
}

// Row is the number to persist for a key: the highest number of the key
// that may have been handed out (gapless: exactly the last one answered;
// cached: the end of the reservation).
type Row struct {
	Key
	Num int64
}

// Request is a gapless request id stored with the rows of its group commit.
// Scope is the fingerprint of the caller's credential
// (segment.RequestID.Scope): the stored key is (Biz, Scope, ID).
type Request struct {
	Biz, Scope, ID, SubKey string
	Count                  int64
	Range                  segment.Range
}

// ShardWrite is one shard's part of Store.PersistShards: Persist's
// arguments.
type ShardWrite struct {
	Shard int
	Epoch int64
	Rows  []Row
	Reqs  []Request
}

// PersistOne is Persist through PersistShards with one part: the stores
// implement Persist with it, so a single persist and a group commit run
// the same code.
func PersistOne(ctx context.Context, st interface {
	PersistShards(context.Context, []ShardWrite) ([]error, error)
}, shard int, epoch int64, rows []Row, reqs []Request) error {
	errs, err := st.PersistShards(ctx, []ShardWrite{{Shard: shard, Epoch: epoch, Rows: rows, Reqs: reqs}})
	if err != nil {
		return err
	}
	return errs[0]
}

// Store is the durable side of the owners. Implemented by
// ordered/mysqlstore (a cluster) and ordered/boltstore (a standalone node),
// each on its segment store's database. All methods are safe for
// concurrent use; each is one atomic operation.
type Store interface {
	// Claim makes epoch the shard's stored epoch, raising it (never
	// lowering it): a stored epoch above epoch fails with a *FencedError
	// (ErrFenced) naming it, and changes nothing. owner is recorded with
	// the epoch: the stored epoch itself may be claimed again only by the
	// owner that claimed it (a retry); another owner's claim of it fails
	// with a *FencedError too, so no two owners ever hold one epoch (a
	// restored ZooKeeper can grant an epoch twice). Claim waits for
	// persists of the shard in flight (they hold the epoch row), so after
	// it returns no persist of an older epoch can commit.
	Claim(ctx context.Context, shard int, epoch int64, owner string) error
	// Load returns the persisted number of each key of the shard that has
	// a row (keys without a row are absent from the map), after checking
	// that the shard's stored epoch is epoch (ErrFenced otherwise).
	Load(ctx context.Context, shard int, epoch int64, keys []Key) (map[Key]int64, error)
	// Persist raises each row to Num (GREATEST: never lowers it, so
	// persists of one shard may commit in any order), creating missing
	// rows, and inserts reqs, in one atomic operation conditional on the
	// shard's stored epoch being epoch. ErrFenced when it is not: nothing
	// written. A request id that is already stored fails the whole
	// operation with a *DuplicateRequestsError naming the ids: nothing
	// written.
	Persist(ctx context.Context, shard int, epoch int64, rows []Row, reqs []Request) error
	// PersistShards is Persist of several shards (each at most once) in
	// one atomic operation: the node's group commit across its shards.
	// Each part is conditional on its own shard's epoch and its own
	// request ids, and fails alone: errs[i] is nil when part i committed,
	// ErrFenced when its shard's stored epoch is not its Epoch, a
	// *DuplicateRequestsError when its request ids are stored, or
	// segment.ErrInvalid when it is malformed; nothing of a failed part
	// is written, and the other parts commit without it. err fails every
	// part (then errs is nil and nothing was written, or, for an unknown
	// outcome such as a timeout at the commit, possibly all of it).
	PersistShards(ctx context.Context, parts []ShardWrite) (errs []error, err error)
	// WriteBack sets each row to Num exactly (it lowers a row: a planned
	// hand-off writes back the exact counters over its reservations), in
	// one atomic operation conditional on the shard's stored epoch being
	// epoch (ErrFenced otherwise: nothing written). Only the shard's
	// current owner may lower a row, which is what the epoch guarantees.
	WriteBack(ctx context.Context, shard int, epoch int64, rows []Row) error
	// LookupRequests returns the stored requests of a business and scope
	// among ids (ids not stored are absent).
	LookupRequests(ctx context.Context, biz, scope string, ids []string) (map[string]Request, error)
}

// GatedWriteBacker is a Store whose write-back runs a check on the
// session that will write, after the session reached its server and
// before any statement. A store whose connections may reach another
// server (a failover behind a VIP or a proxy) reports the change when a
// new session first reaches it (mysqlstore's OnServerChange, which closes
// the failover gate), so a check of the gate there sees the change before
// the write-back lowers a row on the new server. Without it, the
// write-back whose own new connection found the failover would still run
// its statement there: the gate closes, and the exact counters land
// anyway, below numbers a later owner answered and raised on that server
// (its claim lost by the failover, so the epoch fence passes). check's
// error is returned as it is (wrapped), with nothing written; a retried
// attempt on a new session runs check again.
type GatedWriteBacker interface {
	WriteBackGated(ctx context.Context, shard int, epoch int64, rows []Row, check func() error) error
}

// ErrFenced: the shard's stored epoch is not the caller's: another node
// took the shard over (or the caller's claim was lost). Nothing was written.
var ErrFenced = errors.New("ordered: shard epoch changed (another owner)")

// ErrShardBusy: the store's shard row stayed locked by another
// transaction for the whole lock wait (a persist of an owner that paused
// mid-transaction). It is transient by design: the store's sessions have
// a server-side idle limit, so the paused owner's transaction is rolled
// back within seconds; the caller retries soon rather than backing off.
var ErrShardBusy = errors.New("ordered: shard row locked by another transaction")

// ErrHandOffDeferred: Release changed nothing because the shard cannot be
// handed off cleanly now (the barrier's gate is closed after a MySQL server
// change: the exact write-back would be refused). The shard stays this
// node's and serving; the coordinator tries the hand-off again later.
var ErrHandOffDeferred = errors.New("ordered: hand-off deferred until the ORDERED gate is open")

// ErrUncleanHandOff: Release stopped serving the shard but could not write
// its exact counters back (the gate or the store refused until the
// hand-off's deadline). The store may hold less than this node handed out
// (a lossy MySQL failover), so the shard must not be released as clean:
// the next owner waits out a lease, while this node's barrier raises what
// it reserved (Allocator.Remembered).
var ErrUncleanHandOff = errors.New("ordered: hand-off without its exact write-back")

// errServerChangedSinceTerm: a hand-off's exact write-back was refused
// because the MySQL server changed since the term was granted: the new server's epoch fence may have lost a later owner's
// claim, so the write could lower rows that owner raised
// (Allocator.writeBack). Final: not retried.
var errServerChangedSinceTerm = errors.New("ordered: the MySQL server changed since the term was granted; no exact write-back")

type leavingKey struct{}

// Leaving marks ctx as the context of a Release made because the node
// leaves the cluster (Coordinator.Close): the shard has to go, so a closed
// gate is waited for (bounded by ctx) instead of deferring the hand-off.
func Leaving(ctx context.Context) context.Context { return context.WithValue(ctx, leavingKey{}, true) }

// IsLeaving reports whether ctx was marked by Leaving.
func IsLeaving(ctx context.Context) bool { v, _ := ctx.Value(leavingKey{}).(bool); return v }

// FencedError is a Claim refused because the store holds a higher epoch
// than the claim's (Stored). It is ErrFenced. The coordinator's epochs
// must move above Stored: after its own record was lost (a wiped
// ZooKeeper), its counter restarts below the store's.
type FencedError struct {
	Shard         int
	Epoch, Stored int64
}

func (e *FencedError) Error() string {
	return fmt.Sprintf("ordered: shard %d: claim of epoch %d refused: the store holds epoch %d (a newer owner, or the coordinator lost its record)",
		e.Shard, e.Epoch, e.Stored)
}

// Is makes errors.Is(err, ErrFenced) true.
func (e *FencedError) Is(target error) bool { return target == ErrFenced }

// DuplicateRequestsError is Persist's refusal when request ids of the batch
// are already stored (a retry of a request served before this owner's
// term). Nothing was written.
type DuplicateRequestsError struct {
	Requests []RequestKey
}

// key is the RequestKey of q.
func (q *Request) key() RequestKey { return RequestKey{Biz: q.Biz, Scope: q.Scope, ID: q.ID} }

// RequestKey names one stored request id.
type RequestKey struct {
	Biz, Scope, ID string
}

func (e *DuplicateRequestsError) Error() string {
	return fmt.Sprintf("ordered: %d request ids of the batch are already stored", len(e.Requests))
}
