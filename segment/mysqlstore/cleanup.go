package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"math/rand/v2"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/idgen/idgen/internal/mysqldb"
)

// CleanupRequests deletes ORDERED request ids older than
// Config.RequestRetention, in batches of Config.CleanupBatch rows, and
// returns how many it deleted. One node at a time does it: the run holds
// the server lock idgen:cleanup:<database> (GET_LOCK), and a node that
// finds it taken returns 0 at once.
//
// Each batch first reads the keys of expired rows (a plain read, no locks)
// and then deletes those rows by primary key, so the deletion never
// locks a range of the created_at index that new requests insert into.
func (s *Store) CleanupRequests(ctx context.Context) (int64, error) {
	cctx, cancel := s.conn.OpContext(ctx)
	conn, err := s.db.Conn(cctx)
	cancel()
	if err != nil {
		return 0, s.conn.Classify(ctx, "clean up request ids", err)
	}
	defer conn.Close()
	cctx, cancel = s.conn.OpContext(ctx)
	release, err := getLock(cctx, conn, lockName("cleanup", s.dbName), 0)
	cancel()
	if errors.Is(err, errLockBusy) {
		s.log.Debug("request id cleanup skipped: another node is running it")
		return 0, nil
	}
	if err != nil {
		return 0, s.conn.Classify(ctx, "clean up request ids", err)
	}
	defer release()

	cutoff := mysqldb.Now().Add(-s.cfg.RequestRetention)
	var total int64
	for {
		found, deleted, err := s.cleanupBatch(ctx, conn, cutoff)
		total += deleted
		if err != nil {
			return total, s.conn.Classify(ctx, "clean up request ids", err)
		}
		if found < int64(s.cfg.CleanupBatch) {
			return total, nil
		}
		select {
		case <-ctx.Done():
			return total, s.conn.Classify(ctx, "clean up request ids", ctx.Err())
		case <-s.stop:
			return total, nil
		default:
		}
	}
}

// cleanupBatch deletes up to CleanupBatch expired rows; it returns how many
// rows it found expired (a full batch means there may be more) and how
// many it deleted.
func (s *Store) cleanupBatch(ctx context.Context, conn *sql.Conn, cutoff time.Time) (found, deleted int64, err error) {
	cctx, cancel := s.conn.OpContext(ctx)
	defer cancel()
	rows, err := conn.QueryContext(cctx,
		`SELECT biz, request_id FROM ordered_request WHERE created_at < ? ORDER BY created_at LIMIT ?`,
		cutoff, s.cfg.CleanupBatch)
	if err != nil {
		return 0, 0, err
	}
	var args []any
	for rows.Next() {
		var biz string
		var id []byte
		if err := rows.Scan(&biz, &id); err != nil {
			rows.Close()
			return 0, 0, err
		}
		args = append(args, biz, id)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, 0, err
	}
	if len(args) == 0 {
		return 0, 0, nil
	}
	n := len(args) / 2
	var q strings.Builder
	q.WriteString(`DELETE FROM ordered_request WHERE created_at < ? AND (`)
	for i := 0; i < n; i++ {
		if i > 0 {
			q.WriteString(" OR ")
		}
		q.WriteString("(biz = ? AND request_id = ?)")
	}
	q.WriteString(")")
	res, err := conn.ExecContext(cctx, q.String(), append([]any{cutoff}, args...)...)
	if err != nil {
		return 0, 0, err
	}
	deleted, err = res.RowsAffected()
	return int64(n), deleted, err
}

// cleanupLoop runs CleanupRequests every CleanupInterval (with jitter, so
// nodes started together do not all try at the same moment).
func (s *Store) cleanupLoop() {
	defer close(s.done)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-s.stop
		cancel()
	}()
	for {
		wait := s.cfg.CleanupInterval/2 + rand.N(s.cfg.CleanupInterval)
		t := time.NewTimer(wait)
		select {
		case <-s.stop:
			t.Stop()
			return
		case <-t.C:
		}
		start := time.Now()
		n, err := s.CleanupRequests(ctx)
		switch {
		case err != nil && ctx.Err() == nil:
			s.log.Warn("request id cleanup failed", zap.Int64("deleted", n), zap.Error(err))
		case n > 0:
			s.log.Info("request ids cleaned up", zap.Int64("deleted", n), zap.Duration("took", time.Since(start)))
		}
	}
}
