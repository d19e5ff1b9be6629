// Package boltstore is the ORDERED owners' store (ordered.Store) of a
// standalone node: Claim, Load, Persist, WriteBack and LookupRequests on
// the node's bbolt file, each conditional on the shard's epoch. It runs on
// the segment store's open file (New(*segment/boltstore.Store)): bbolt
// allows one handle per file.
//
// The owners persist on the very rows of the per-request path: the
// ordered bucket (biz 0x00 sub_key -> 8-byte number) and the requests and
// req_time buckets, in the formats ReserveOrderedReplay writes
// (internal/boltfile). So a node switching between the two paths
// continues above the other's numbers and replays its request ids.
//
// A standalone node has one process and one writer, so the epochs here
// guard against a stale term of the same process (an owner that lost the
// shard and was handed it again) rather than against another machine; the
// rules are the same as ordered/mysqlstore's, and the same suite
// (ordered/storetest) checks them.
//
// Layout added to segment/boltstore's (created by the first Claim):
//
//	ordered_shards  2-digit shard ("07") -> epoch(8) updated_at(8, Unix ns) owner
package boltstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	bolt "go.etcd.io/bbolt"

	"github.com/idgen/idgen/internal/boltfile"
	"github.com/idgen/idgen/ordered"
	"github.com/idgen/idgen/segment"
	segmentbolt "github.com/idgen/idgen/segment/boltstore"
)

// Store is the ORDERED owners' store in the file of a
// segment/boltstore.Store. It is safe for concurrent use.
type Store struct {
	file *boltfile.File
}

var _ ordered.Store = (*Store)(nil)

// New returns the owners' store in seg's file. Closing seg closes it too;
// it has nothing of its own to close.
func New(seg *segmentbolt.Store) *Store { return &Store{file: seg.File()} }

var bucketShards = []byte("ordered_shards")

// shardRecord is a stored shard epoch.
type shardRecord struct {
	epoch   int64
	updated int64 // Unix ns
	owner   string
}

func shardKey(shard int) []byte { return fmt.Appendf(nil, "%02d", shard) }

func encodeShard(r shardRecord) []byte {
	b := make([]byte, 0, 16+len(r.owner))
	b = append(b, boltfile.U64(r.epoch)...)
	b = append(b, boltfile.U64(r.updated)...)
	return append(b, r.owner...)
}

func decodeShard(v []byte) (shardRecord, error) {
	if len(v) < 16 {
		return shardRecord{}, fmt.Errorf("boltstore: shard epoch record of %d bytes (want at least 16): the file is damaged", len(v))
	}
	return shardRecord{epoch: boltfile.I64(v[0:8]), updated: boltfile.I64(v[8:16]), owner: string(v[16:])}, nil
}

// Claim makes epoch the shard's stored epoch (ordered.Store): refused with
// ordered.ErrFenced, changing nothing, when the stored epoch is above it.
// Persists of the shard in flight finish first: bbolt has one writer.
func (s *Store) Claim(ctx context.Context, shard int, epoch int64, owner string) error {
	op := fmt.Sprintf("boltstore: claim ORDERED shard %d at epoch %d", shard, epoch)
	if err := ordered.ValidateShard(shard); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	if epoch < 0 {
		return fmt.Errorf("%s: %w: negative epoch (epochs come from the coordinator and start at 0)", op, segment.ErrInvalid)
	}
	owner = strings.ToValidUTF8(owner, "\uFFFD")
	now := s.file.Clock.Now().UnixNano()
	var opErr error
	err := s.file.Batch(ctx, func(tx *bolt.Tx) error {
		opErr = nil
		b, err := tx.CreateBucketIfNotExists(bucketShards)
		if err != nil {
			return err
		}
		k := shardKey(shard)
		if v := b.Get(k); v != nil {
			cur, err := decodeShard(v)
			if err != nil {
				return err
			}
			if cur.epoch > epoch || (cur.epoch == epoch && cur.owner != owner) {
				// Each epoch has one claimer (see ordered/mysqlstore's Claim).
				opErr = fmt.Errorf("%s: %w: shard %d is at epoch %d (owner %q), not below %d: a newer owner claimed it; give the shard up",
					op, &ordered.FencedError{Shard: shard, Epoch: epoch, Stored: cur.epoch}, shard, cur.epoch, cur.owner, epoch)
				return nil
			}
		}
		return b.Put(k, encodeShard(shardRecord{epoch: epoch, updated: now, owner: owner}))
	})
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return opErr
}

// checkEpoch returns nil when the shard's stored epoch is epoch, else an
// error wrapping ordered.ErrFenced that says whose the shard is.
func checkEpoch(tx *bolt.Tx, shard int, epoch int64) error {
	var v []byte
	if b := tx.Bucket(bucketShards); b != nil {
		v = b.Get(shardKey(shard))
	}
	if v == nil {
		return fmt.Errorf("%w: shard %d was never claimed: Claim it before loading or persisting", ordered.ErrFenced, shard)
	}
	cur, err := decodeShard(v)
	if err != nil {
		return err
	}
	switch {
	case cur.epoch > epoch:
		return fmt.Errorf("%w: shard %d is at epoch %d (owner %q), not %d: it was claimed again; stop serving it",
			ordered.ErrFenced, shard, cur.epoch, cur.owner, epoch)
	case cur.epoch < epoch:
		return fmt.Errorf("%w: shard %d is at epoch %d, below %d: claim it first", ordered.ErrFenced, shard, cur.epoch, epoch)
	}
	return nil
}

// Load returns the stored number of each key that has a row
// (ordered.Store), read in one read transaction after checking the epoch.
func (s *Store) Load(ctx context.Context, shard int, epoch int64, keys []ordered.Key) (map[ordered.Key]int64, error) {
	op := fmt.Sprintf("boltstore: load %d ORDERED keys of shard %d at epoch %d", len(keys), shard, epoch)
	if err := ordered.ValidateShard(shard); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	for _, k := range keys {
		if err := ordered.ValidateKey(shard, k); err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	out := make(map[ordered.Key]int64, len(keys))
	err := s.file.DB.View(func(tx *bolt.Tx) error {
		if err := checkEpoch(tx, shard, epoch); err != nil {
			return err
		}
		ord := tx.Bucket(boltfile.BucketOrdered)
		for _, k := range keys {
			v := ord.Get(boltfile.JoinKey(k.Biz, k.SubKey))
			if v == nil {
				continue
			}
			if len(v) != 8 {
				return fmt.Errorf("ordered counter of %q/%q is %d bytes: the file is damaged", k.Biz, k.SubKey, len(v))
			}
			out[k] = boltfile.I64(v)
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return out, nil
}

// Persist is PersistShards with one part (ordered.Store).
func (s *Store) Persist(ctx context.Context, shard int, epoch int64, rows []ordered.Row, reqs []ordered.Request) error {
	return ordered.PersistOne(ctx, s, shard, epoch, rows, reqs)
}

// PersistShards raises the parts' rows (never lowers one) and inserts
// their request ids in one fsynced transaction, each part conditional on
// its shard's epoch (ordered.Store). Each part is checked before anything
// of it is written, so a part's refusal (ErrFenced, or a
// *ordered.DuplicateRequestsError naming the stored ids) writes nothing of
// it, while the other parts commit. A stored request id past
// RequestRetention counts as gone, as in ReserveOrderedReplay: it is
// replaced.
func (s *Store) PersistShards(ctx context.Context, parts []ordered.ShardWrite) ([]error, error) {
	op := fmt.Sprintf("boltstore: persist ORDERED rows of %d shards", len(parts))
	errs, err := ordered.ValidateShardWrites(parts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	valid := make([]bool, len(parts))
	for i, p := range parts {
		if valid[i] = errs[i] == nil; !valid[i] {
			errs[i] = fmt.Errorf("%s: shard %d: %w", op, p.Shard, errs[i])
		}
	}
	now := s.file.Clock.Now().UnixNano()
	expiredBefore := s.file.ExpiredBefore(now)
	err = s.file.Batch(ctx, func(tx *bolt.Tx) error {
		for i, p := range parts {
			if !valid[i] {
				continue
			}
			var err error
			if errs[i], err = persistPart(tx, p, now, expiredBefore); err != nil {
				return err
			}
			if errs[i] != nil && !isDuplicates(errs[i]) {
				errs[i] = fmt.Errorf("boltstore: persist %d ORDERED rows and %d request ids of shard %d at epoch %d: %w",
					len(p.Rows), len(p.Reqs), p.Shard, p.Epoch, errs[i])
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return errs, nil
}

func isDuplicates(err error) bool {
	var dup *ordered.DuplicateRequestsError
	return errors.As(err, &dup)
}

// persistPart writes one part of PersistShards in tx, after checking its
// epoch and its request ids: refused is the part's own refusal (nothing
// of it written), err a failure of the transaction.
func persistPart(tx *bolt.Tx, p ordered.ShardWrite, now, expiredBefore int64) (refused, err error) {
	if err := checkEpoch(tx, p.Shard, p.Epoch); err != nil {
		return err, nil
	}
	reqsB, byTime := tx.Bucket(boltfile.BucketRequests), tx.Bucket(boltfile.BucketReqTime)
	var (
		dup   *ordered.DuplicateRequestsError
		prevs = make([]boltfile.Request, len(p.Reqs)) // created -1: none stored
		rks   = make([][]byte, len(p.Reqs))
	)
	for i, q := range p.Reqs {
		rks[i] = boltfile.JoinKey(q.Biz, segment.StoredRequestID(q.Scope, q.ID))
		v := reqsB.Get(rks[i])
		prevs[i].Created = -1
		if v == nil {
			continue
		}
		prev, err := boltfile.DecodeRequest(v)
		if err != nil {
			return nil, err
		}
		if prev.Created >= expiredBefore {
			if dup == nil {
				dup = &ordered.DuplicateRequestsError{}
			}
			dup.Requests = append(dup.Requests, ordered.RequestKey{Biz: q.Biz, Scope: q.Scope, ID: q.ID})
		}
		prevs[i] = prev
	}
	if dup != nil {
		return dup, nil
	}
	for i, q := range p.Reqs {
		if prev := prevs[i]; prev.Created >= 0 {
			// Expired but not cleaned up yet: forget it.
			if err := boltfile.DeleteRequest(reqsB, byTime, rks[i], prev.Created); err != nil {
				return nil, err
			}
		}
		rec := boltfile.Request{Created: now, Range: q.Range, Count: q.Count, SubKey: q.SubKey}
		if err := boltfile.PutRequest(reqsB, byTime, rks[i], rec); err != nil {
			return nil, err
		}
	}
	return nil, putRows(tx, p.Rows, false)
}

// WriteBack sets rows to their numbers exactly (it may lower a row: a
// planned hand-off writes back its exact counters) in one fsynced
// transaction conditional on the shard's epoch (ordered.Store).
func (s *Store) WriteBack(ctx context.Context, shard int, epoch int64, rows []ordered.Row) error {
	op := fmt.Sprintf("boltstore: write back %d ORDERED rows of shard %d at epoch %d", len(rows), shard, epoch)
	if err := ordered.ValidatePersist(shard, rows, nil); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	var opErr error
	err := s.file.Batch(ctx, func(tx *bolt.Tx) error {
		opErr = nil
		if err := checkEpoch(tx, shard, epoch); err != nil {
			opErr = fmt.Errorf("%s: %w", op, err)
			return nil
		}
		return putRows(tx, rows, true)
	})
	if err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	return opErr
}

// putRows writes rows into the ORDERED counters: exact sets them
// (WriteBack), else a row is only raised (Persist).
func putRows(tx *bolt.Tx, rows []ordered.Row, exact bool) error {
	ord := tx.Bucket(boltfile.BucketOrdered)
	for _, r := range rows {
		k := boltfile.JoinKey(r.Biz, r.SubKey)
		if !exact {
			if v := ord.Get(k); v != nil {
				if len(v) != 8 {
					return fmt.Errorf("ordered counter of %q/%q is %d bytes: the file is damaged", r.Biz, r.SubKey, len(v))
				}
				if boltfile.I64(v) >= r.Num {
					continue
				}
			}
		}
		if err := ord.Put(k, boltfile.U64(r.Num)); err != nil {
			return err
		}
	}
	return nil
}

// LookupRequests returns the stored requests of biz and scope among ids
// (ordered.Store); ids past RequestRetention count as gone, as in
// ReserveOrderedReplay.
func (s *Store) LookupRequests(ctx context.Context, biz, scope string, ids []string) (map[string]ordered.Request, error) {
	op := fmt.Sprintf("boltstore: look up %d ORDERED request ids of %q", len(ids), biz)
	if err := segment.ValidateBizName(biz); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	for _, id := range ids {
		if err := ordered.ValidateRequestID(scope, id); err != nil {
			return nil, fmt.Errorf("%s: %w", op, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	expiredBefore := s.file.ExpiredBefore(s.file.Clock.Now().UnixNano())
	out := make(map[string]ordered.Request, len(ids))
	err := s.file.DB.View(func(tx *bolt.Tx) error {
		reqs := tx.Bucket(boltfile.BucketRequests)
		for _, id := range ids {
			v := reqs.Get(boltfile.JoinKey(biz, segment.StoredRequestID(scope, id)))
			if v == nil {
				continue
			}
			q, err := boltfile.DecodeRequest(v)
			if err != nil {
				return err
			}
			if q.Created < expiredBefore {
				continue
			}
			out[id] = ordered.Request{Biz: biz, Scope: scope, ID: id, SubKey: q.SubKey, Count: q.Count, Range: q.Range}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return out, nil
}
