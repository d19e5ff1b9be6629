package boltstore

import (
	"bytes"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/zap"

	"github.com/idgen/idgen/internal/boltfile"
)

// cleanupLoop deletes expired request ids every CleanupInterval. A pass
// deletes at most CleanupBatch of them, so the write lock (which every
// reservation needs) is never held for long; a backlog drains over several
// passes, the next one starting at once while a pass comes back full.
func (s *Store) cleanupLoop() {
	defer close(s.done)
	t := time.NewTicker(s.opts.CleanupInterval)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
		}
		for {
			n, err := s.purgeExpired(s.opts.Clock.Now(), s.opts.CleanupBatch)
			if err != nil {
				s.log.Warn("request id cleanup failed", zap.Error(err))
				break
			}
			if n > 0 {
				s.log.Debug("expired request ids deleted", zap.Int("count", n))
			}
			if n < s.opts.CleanupBatch {
				break
			}
			select {
			case <-s.stop:
				return
			default:
			}
		}
	}
}

// purgeExpired deletes up to limit request ids older than RequestRetention
// at now and returns how many it deleted. Keys are collected before they
// are deleted because deleting under a bbolt cursor can skip entries.
func (s *Store) purgeExpired(now time.Time, limit int) (int, error) {
	cutoff := boltfile.U64(s.file.ExpiredBefore(now.UnixNano()))
	n := 0
	err := s.db.Update(func(tx *bolt.Tx) error {
		n = 0
		reqs, byTime := tx.Bucket(boltfile.BucketRequests), tx.Bucket(boltfile.BucketReqTime)
		var expired [][]byte
		c := byTime.Cursor()
		for k, _ := c.First(); k != nil && len(expired) < limit; k, _ = c.Next() {
			if len(k) < 8 || bytes.Compare(k[:8], cutoff) >= 0 {
				break
			}
			expired = append(expired, bytes.Clone(k))
		}
		for _, k := range expired {
			rk := k[8:]
			// The id may have been reused after expiry: only delete the
			// record this index entry points at.
			if v := reqs.Get(rk); v != nil {
				if q, err := boltfile.DecodeRequest(v); err == nil && bytes.Equal(boltfile.U64(q.Created), k[:8]) {
					if err := reqs.Delete(rk); err != nil {
						return err
					}
				}
			}
			if err := byTime.Delete(k); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	return n, err
}
