package boltstore

import (
	"context"
	"fmt"
	"math"

	bolt "go.etcd.io/bbolt"

	"github.com/idgen/idgen/internal/boltfile"
	"github.com/idgen/idgen/segment"
)

// ReserveSegment implements segment.Store: one fsynced transaction that
// advances the business's counter by step.
func (s *Store) ReserveSegment(ctx context.Context, biz string, step int64) (segment.Range, error) {
	if err := segment.ValidateStep(step); err != nil {
		return segment.Range{}, fmt.Errorf("boltstore: reserve segment for %q: %w", biz, err)
	}
	var (
		r     segment.Range
		opErr error // a business error: reported without failing the batch
	)
	err := s.file.Batch(ctx, func(tx *bolt.Tx) error {
		r, opErr = segment.Range{}, nil
		if tx.Bucket(bucketBiz).Get([]byte(biz)) == nil {
			opErr = fmt.Errorf("boltstore: reserve segment: biz %q: %w", biz, segment.ErrUnknownBiz)
			return nil
		}
		seg := tx.Bucket(bucketSegments)
		v := seg.Get([]byte(biz))
		if len(v) != 8 {
			return fmt.Errorf("boltstore: biz %q has no valid segment counter", biz)
		}
		old := boltfile.I64(v)
		if old > math.MaxInt64-step {
			opErr = fmt.Errorf("boltstore: biz %q counter at %d: %w", biz, old, segment.ErrExhausted)
			return nil
		}
		if err := seg.Put([]byte(biz), boltfile.U64(old+step)); err != nil {
			return err
		}
		r = segment.Range{First: old + 1, Last: old + step}
		return nil
	})
	if err != nil {
		return segment.Range{}, fmt.Errorf("boltstore: reserve segment for %q: %w", biz, err)
	}
	return r, opErr
}

// ReserveOrdered implements segment.Store.
func (s *Store) ReserveOrdered(ctx context.Context, req segment.OrderedRequest) (segment.Range, error) {
	r, err := s.ReserveOrderedReplay(ctx, req)
	return r.Range, err
}

// ReserveOrderedReplay implements segment.ReplayReporter. The counter of
// (biz, sub key) is created at StartNum-1 on first use; with a request id,
// the range is stored in the same transaction and a retry within
// RequestRetention gets it back (replayed = true).
//
// Runs through bbolt's Batch: the closure only reads its inputs and assigns
// its outputs, so bbolt may re-run it alone after a failed batch.
func (s *Store) ReserveOrderedReplay(ctx context.Context, req segment.OrderedRequest) (segment.Reservation, error) {
	req, err := segment.NormalizeOrderedRequest(req)
	if err != nil {
		return segment.Reservation{}, fmt.Errorf("boltstore: reserve ordered: %w", err)
	}
	now := s.opts.Clock.Now().UnixNano()
	expiredBefore := s.file.ExpiredBefore(now)
	var (
		r     segment.Reservation
		opErr error
	)
	err = s.file.Batch(ctx, func(tx *bolt.Tx) error {
		r, opErr = segment.Reservation{}, nil
		if tx.Bucket(bucketBiz).Get([]byte(req.Biz)) == nil {
			opErr = fmt.Errorf("boltstore: reserve ordered: biz %q: %w", req.Biz, segment.ErrUnknownBiz)
			return nil
		}
		reqs, byTime := tx.Bucket(boltfile.BucketRequests), tx.Bucket(boltfile.BucketReqTime)
		var rk []byte
		if req.RequestID != "" {
			rk = boltfile.JoinKey(req.Biz, segment.StoredRequestID(req.RequestScope, req.RequestID))
			if v := reqs.Get(rk); v != nil {
				prev, err := boltfile.DecodeRequest(v)
				if err != nil {
					return err
				}
				if prev.Created >= expiredBefore {
					if prev.SubKey != req.SubKey || prev.Count != req.Count {
						opErr = fmt.Errorf("boltstore: biz %q: %w", req.Biz, segment.RequestMismatch())
						return nil
					}
					r = segment.Reservation{Range: prev.Range, Replayed: true}
					return nil
				}
				// Expired but not cleaned up yet: forget it, this is a new request.
				if err := boltfile.DeleteRequest(reqs, byTime, rk, prev.Created); err != nil {
					return err
				}
			}
		}
		ord := tx.Bucket(boltfile.BucketOrdered)
		k := boltfile.JoinKey(req.Biz, req.SubKey)
		old := req.StartNum - 1
		if v := ord.Get(k); v != nil {
			if len(v) != 8 {
				return fmt.Errorf("boltstore: ordered counter of %q/%q is %d bytes", req.Biz, req.SubKey, len(v))
			}
			old = boltfile.I64(v)
		}
		raised := old < req.Above
		old = max(old, req.Above)
		if old > math.MaxInt64-req.Count {
			opErr = fmt.Errorf("boltstore: biz %q sub key %q counter at %d: %w", req.Biz, req.SubKey, old, segment.ErrExhausted)
			return nil
		}
		if req.Fence != nil {
			if err := req.Fence(); err != nil {
				opErr = fmt.Errorf("boltstore: biz %q sub key %q: %w", req.Biz, req.SubKey, err)
				return nil
			}
		}
		if err := ord.Put(k, boltfile.U64(old+req.Count)); err != nil {
			return err
		}
		got := segment.Range{First: old + 1, Last: old + req.Count}
		if rk != nil {
			if err := boltfile.PutRequest(reqs, byTime, rk, boltfile.Request{Created: now, Range: got, Count: req.Count, SubKey: req.SubKey}); err != nil {
				return err
			}
		}
		r = segment.Reservation{Range: got, Raised: raised}
		return nil
	})
	if err != nil {
		return segment.Reservation{}, fmt.Errorf("boltstore: reserve ordered for %q: %w", req.Biz, err)
	}
	return r, opErr
}
