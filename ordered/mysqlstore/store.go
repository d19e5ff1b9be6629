// Package mysqlstore is the ORDERED owners' store (ordered.Store) on the
// MySQL/MariaDB database of an idgen cluster: Claim, Load, Persist,
// WriteBack and LookupRequests, each fenced by the shard's epoch. It runs
// on the segment store's connection (New(*segment/mysqlstore.Store)): one
// pool, one conflict counter, one error classification per node.
//
// The owners share the rows of the per-request path (ordered_NN,
// ordered_request), so a cluster can move from ReserveOrdered to owners
// and back without a migration of data: an owner loads the rows
// ReserveOrdered left, and ReserveOrdered continues above the rows an
// owner persisted. The schema is segment/mysqlstore's (its Migrate).
//
// Fencing lives in ordered_shard (schema 6): Claim raises a shard's epoch
// under the row's exclusive lock, and every Persist, WriteBack and Load
// is a transaction that starts with
//
//	UPDATE ordered_shard SET persists = persists + 1 WHERE shard = ? AND epoch = ?
//
// which both checks the epoch and takes that lock until the commit. So a
// Claim waits for the writes of the shard in flight, and once it has
// committed no write of an older epoch can commit. The check is a write
// on purpose: on Galera a read lock is local to one member, while two
// members' writes to one row are certified against each other, so a
// persist racing a Claim on another member is rolled back (and retried,
// then fenced) rather than committed beside it.
//
// The barrier's repairs after a MySQL server change (RaiseOrdered,
// RestoreRequests) stay in segment/mysqlstore: they belong to the
// replication barrier, not to an owner. They are not fenced (they run
// while the barrier holds every persist back, and only raise rows or add
// missing request ids), and the per-request path without owners needs
// them too.
package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	"github.com/idgen/idgen/internal/mysqldb"
	"github.com/idgen/idgen/internal/mysqlerr"
	"github.com/idgen/idgen/ordered"
	"github.com/idgen/idgen/segment"
	segmentmysql "github.com/idgen/idgen/segment/mysqlstore"
)

// Store is the ORDERED owners' store on the database of a
// segment/mysqlstore.Store. It is safe for concurrent use.
type Store struct {
	conn *mysqldb.Conn
	// ignoreEpoch switches the epoch condition of persists and
	// write-backs off (fault injection's negative control only:
	// UnsafeIgnoreEpoch).
	ignoreEpoch atomic.Bool
}

var _ ordered.Store = (*Store)(nil)

// New returns the owners' store on seg's connection pool. Closing seg
// closes it too; it has nothing of its own to close.
func New(seg *segmentmysql.Store) *Store { return &Store{conn: seg.Conn()} }

// UnsafeIgnoreEpoch makes ORDERED persists and write-backs ignore the
// shard's epoch, so a deposed owner's stale write-back lands. It exists
// for fault injection's negative control (IDGEN_FAULT_ORDERED_NO_EPOCH in
// faultinject builds) and must never be called otherwise: it is the
// mechanism that keeps a stale counter from being written back.
func (s *Store) UnsafeIgnoreEpoch() { s.ignoreEpoch.Store(true) }

// ownedBatch bounds the rows (or request ids, or keys) of one statement:
// the same bound as the raising statements (mysqldb.Batch).
const ownedBatch = mysqldb.Batch

// Claim makes epoch the shard's stored epoch (ordered.Store). One
// transaction: create the shard's row if it has none (the row's first
// claim), else lock it, refuse with ordered.ErrFenced when its epoch is
// above epoch, and record epoch and owner. Claiming the stored epoch again
// succeeds (a retried claim, or an owner restoring an epoch a lossy
// failover lost). The row lock makes a Claim wait for the shard's persists
// in flight: they hold it from their first statement to their commit.
func (s *Store) Claim(ctx context.Context, shard int, epoch int64, owner string) error {
	op := fmt.Sprintf("claim ORDERED shard %d at epoch %d", shard, epoch)
	if err := ordered.ValidateShard(shard); err != nil {
		return fmt.Errorf("mysqlstore: %s: %w", op, err)
	}
	if epoch < 0 {
		return fmt.Errorf("mysqlstore: %s: %w: negative epoch (epochs come from the coordinator and start at 0)", op, segment.ErrInvalid)
	}
	owner = mysqldb.OwnerColumn(owner)
	cctx, cancel := s.conn.OpContext(ctx)
	defer cancel()
	err := s.conn.RetryConflicts(cctx, op, func() error { return s.claimOnce(cctx, shard, epoch, owner) })
	return s.ownedErr(ctx, op, err)
}

func (s *Store) claimOnce(ctx context.Context, shard int, epoch int64, owner string) error {
	tx, err := s.conn.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	at := mysqldb.Now()
	// Insert-or-lock in one statement: two nodes claiming a shard that has
	// no row yet queue on the primary key instead of both passing a
	// locking read of a missing row (a gap lock each) and deadlocking on
	// the insert. shard = shard changes nothing, so 0 rows affected means
	// the row was there (ClientFoundRows is off); it is locked either way.
	res, err := tx.ExecContext(ctx,
		`INSERT INTO ordered_shard (shard, epoch, owner, persists, updated_at) VALUES (?, ?, ?, 0, ?)`+
			` ON DUPLICATE KEY UPDATE shard = shard`, shard, epoch, owner, at)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 1 {
		return tx.Commit()
	}
	var (
		stored      int64
		storedOwner string
	)
	if err := tx.QueryRowContext(ctx, `SELECT epoch, owner FROM ordered_shard WHERE shard = ? FOR UPDATE`, shard).
		Scan(&stored, &storedOwner); err != nil {
		return err
	}
	if stored > epoch || (stored == epoch && storedOwner != owner) {
		// Equal epochs of two owners: two coordinators hand out epochs
		// for one database (two clusters on it, or a ZooKeeper that lost
		// its records); each epoch may have one claimer only.
		return fmt.Errorf("%w: shard %d is at epoch %d (owner %q), not below %d: a newer owner claimed it; give the shard up",
			&ordered.FencedError{Shard: shard, Epoch: epoch, Stored: stored}, shard, stored, storedOwner, epoch)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE ordered_shard SET epoch = ?, owner = ?, updated_at = ? WHERE shard = ?`,
		epoch, owner, at, shard); err != nil {
		return err
	}
	return tx.Commit()
}

// Load returns the stored number of each key that has a row
// (ordered.Store), after checking that the shard's stored epoch is epoch.
// Keys are read by primary key, ownedBatch per statement.
//
// The check is the persists' fencing write, in one transaction with the
// reads, not a plain read. On one server a plain read would do: the
// previous owners' persists committed before the Claim got the shard's
// lock, so a read after the Claim sees them. But on Galera a node's pool
// may hold connections to two members, and a member's reads do not wait
// for writesets it has not applied yet: a plain read there could miss the
// previous owner's last persist, and the new owner would start below a
// number already answered. A transaction that wrote the shard row commits
// only if no writeset to that row was unapplied when it ran (else the
// applier aborts it, or certification does), and every persist writes that
// row, so the reads of a committed Load saw every earlier persist. The
// price is a commit per Load: one per batch of keys new to a term.
func (s *Store) Load(ctx context.Context, shard int, epoch int64, keys []ordered.Key) (map[ordered.Key]int64, error) {
	op := fmt.Sprintf("load %d ORDERED keys of shard %d at epoch %d", len(keys), shard, epoch)
	if err := ordered.ValidateShard(shard); err != nil {
		return nil, fmt.Errorf("mysqlstore: %s: %w", op, err)
	}
	for _, k := range keys {
		if err := ordered.ValidateKey(shard, k); err != nil {
			return nil, fmt.Errorf("mysqlstore: %s: %w", op, err)
		}
	}
	cctx, cancel := s.conn.OpContext(ctx)
	defer cancel()
	out := make(map[ordered.Key]int64, len(keys))
	err := s.conn.RetryConflicts(cctx, op, func() error {
		clear(out)
		return s.loadOnce(cctx, shard, epoch, keys, out)
	})
	if err != nil {
		return nil, s.ownedErr(ctx, op, err)
	}
	return out, nil
}

func (s *Store) loadOnce(ctx context.Context, shard int, epoch int64, keys []ordered.Key, out map[ordered.Key]int64) error {
	tx, err := s.conn.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	if err := s.fence(ctx, tx, shard, epoch, false); err != nil {
		return err
	}
	for rest := keys; len(rest) > 0; {
		n := min(len(rest), ownedBatch)
		if err := loadBatch(ctx, tx, shard, rest[:n], out); err != nil {
			return err
		}
		rest = rest[n:]
	}
	return tx.Commit()
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

// checkEpoch returns nil when the shard's stored epoch is epoch, else an
// error wrapping ordered.ErrFenced that says whose the shard is.
func (s *Store) checkEpoch(ctx context.Context, q querier, shard int, epoch int64) error {
	var (
		stored int64
		owner  string
	)
	err := q.QueryRowContext(ctx, `SELECT epoch, owner FROM ordered_shard WHERE shard = ?`, shard).Scan(&stored, &owner)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%w: shard %d was never claimed: Claim it before loading or persisting", ordered.ErrFenced, shard)
	}
	if err != nil {
		return err
	}
	return fencedUnless(shard, epoch, stored, owner)
}

// fencedUnless is nil when stored == epoch, else the ErrFenced error for a
// stored epoch above (another owner) or below (a lost claim) the caller's.
func fencedUnless(shard int, epoch, stored int64, owner string) error {
	switch {
	case stored > epoch:
		return fmt.Errorf("%w: shard %d is at epoch %d (owner %q), not %d: another node took it over; stop serving it",
			ordered.ErrFenced, shard, stored, owner, epoch)
	case stored < epoch:
		return fmt.Errorf("%w: shard %d is at epoch %d, below %d: this node's claim was lost (a MySQL failover to a lagging server?); claim it again",
			ordered.ErrFenced, shard, stored, epoch)
	}
	return nil
}

func loadBatch(ctx context.Context, q querier, shard int, keys []ordered.Key, out map[ordered.Key]int64) error {
	var b strings.Builder
	b.WriteString(`SELECT biz, sub_key, num FROM ` + mysqldb.OrderedTable(shard) + ` WHERE (biz, sub_key) IN (`)
	args := make([]any, 0, 2*len(keys))
	for i, k := range keys {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?)")
		args = append(args, k.Biz, []byte(k.SubKey))
	}
	b.WriteString(")")
	rows, err := q.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			biz    string
			subKey []byte
			num    int64
		)
		if err := rows.Scan(&biz, &subKey, &num); err != nil {
			return err
		}
		out[ordered.Key{Biz: biz, SubKey: string(subKey)}] = num
	}
	return rows.Err()
}

// Persist raises rows to their numbers and inserts reqs in one
// transaction conditional on the shard's epoch (ordered.Store). Round
// trips: BEGIN, the fencing UPDATE of ordered_shard, one multi-row INSERT
// of the request ids and one multi-row upsert of the rows (each per
// ownedBatch), COMMIT. It is the owners' group commit, so nothing else is
// read or written on the way.
//
// The fencing UPDATE comes first: it fails fast when the shard is not the
// caller's, and it holds the shard row's lock, so the rest can neither
// race a Claim nor a deposed owner. Request ids come before the rows: a
// duplicate rolls back before any row was written, and then one SELECT per
// business names the stored ids (*ordered.DuplicateRequestsError, nothing
// written). The rows are upserted with ON DUPLICATE KEY UPDATE num =
// GREATEST(num, VALUES(num)): a persist never lowers a row, so persists of
// one shard may commit in any order (WriteBack is the one that lowers). A
// deadlock or a Galera certification conflict rolled the whole transaction
// back and it is run again (mysqldb.Conn.RetryConflicts).
func (s *Store) Persist(ctx context.Context, shard int, epoch int64, rows []ordered.Row, reqs []ordered.Request) error {
	op := fmt.Sprintf("persist %d ORDERED rows and %d request ids of shard %d at epoch %d", len(rows), len(reqs), shard, epoch)
	if err := ordered.ValidatePersist(shard, rows, reqs); err != nil {
		return fmt.Errorf("mysqlstore: %s: %w", op, err)
	}
	return s.fencedWrite(ctx, op, shard, epoch, reqs, rowUpserts(shard, rows, false))
}

// WriteBack sets rows to their numbers exactly, in one transaction
// conditional on the shard's epoch (ordered.Store): the same fencing
// UPDATE first, then upserts with ON DUPLICATE KEY UPDATE num =
// VALUES(num), which may lower a row. A planned hand-off writes back the
// exact counters over its unused reservations, so the next owner
// continues without a gap; only the epoch's holder can, and its persists
// are done by then.
func (s *Store) WriteBack(ctx context.Context, shard int, epoch int64, rows []ordered.Row) error {
	op := fmt.Sprintf("write back %d ORDERED rows of shard %d at epoch %d", len(rows), shard, epoch)
	if err := ordered.ValidatePersist(shard, rows, nil); err != nil {
		return fmt.Errorf("mysqlstore: %s: %w", op, err)
	}
	return s.fencedWrite(ctx, op, shard, epoch, nil, rowUpserts(shard, rows, true))
}

// fencedWrite runs persistOnce with retries and the owners' error rules.
// The statements are built once: a retried attempt sends the same ones.
func (s *Store) fencedWrite(ctx context.Context, op string, shard int, epoch int64, reqs []ordered.Request, rowStmts []mysqldb.Stmt) error {
	reqStmts := mysqldb.RequestInserts(reqs, mysqldb.Now(), "")
	cctx, cancel := s.conn.OpContext(ctx)
	defer cancel()
	err := s.conn.RetryConflicts(cctx, op, func() error {
		return s.persistOnce(cctx, shard, epoch, reqs, reqStmts, rowStmts)
	})
	return s.ownedErr(ctx, op, err)
}

// rowUpserts builds the row statements: exact sets num to the value given
// (WriteBack), else only raises it (Persist).
func rowUpserts(shard int, rows []ordered.Row, exact bool) []mysqldb.Stmt {
	update := " ON DUPLICATE KEY UPDATE num = GREATEST(num, VALUES(num))"
	if exact {
		update = " ON DUPLICATE KEY UPDATE num = VALUES(num)"
	}
	var out []mysqldb.Stmt
	for len(rows) > 0 {
		n := min(len(rows), ownedBatch)
		var b strings.Builder
		b.WriteString("INSERT INTO " + mysqldb.OrderedTable(shard) + " (biz, sub_key, num) VALUES ")
		args := make([]any, 0, 3*n)
		for i, r := range rows[:n] {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("(?, ?, ?)")
			args = append(args, r.Biz, []byte(r.SubKey), r.Num)
		}
		b.WriteString(update)
		out = append(out, mysqldb.Stmt{SQL: b.String(), Args: args})
		rows = rows[n:]
	}
	return out
}

func (s *Store) persistOnce(ctx context.Context, shard int, epoch int64, reqs []ordered.Request, reqStmts, rowStmts []mysqldb.Stmt) error {
	tx, err := s.conn.DB.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit
	if err := s.fence(ctx, tx, shard, epoch, s.ignoreEpoch.Load()); err != nil {
		return err
	}
	faultAfterFence(s, shard)
	for _, st := range reqStmts {
		_, err := tx.ExecContext(ctx, st.SQL, st.Args...)
		if mysqldb.IsDupEntry(err) {
			if err := tx.Rollback(); err != nil {
				return err
			}
			return s.duplicateRequests(ctx, reqs)
		}
		if err != nil {
			return err
		}
	}
	for _, st := range rowStmts {
		if _, err := tx.ExecContext(ctx, st.SQL, st.Args...); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// fence is the first statement of every owner transaction: it counts the
// write in ordered_shard.persists on the condition that the shard's stored
// epoch is epoch, which both checks the epoch and holds the shard row's
// lock until the transaction ends. unsafeAnyEpoch drops the condition
// (UnsafeIgnoreEpoch, fault injection's negative control only).
func (s *Store) fence(ctx context.Context, tx *sql.Tx, shard int, epoch int64, unsafeAnyEpoch bool) error {
	res, err := tx.ExecContext(ctx, `UPDATE ordered_shard SET persists = persists + 1 WHERE shard = ? AND (epoch = ? OR ?)`,
		shard, epoch, unsafeAnyEpoch)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 1 {
		return nil
	}
	// Fenced. Read whose the shard is for the message (rare path).
	if err := s.checkEpoch(ctx, tx, shard, epoch); err != nil {
		return err
	}
	return fmt.Errorf("%w: shard %d left epoch %d meanwhile; claim it again", ordered.ErrFenced, shard, epoch)
}

// duplicateRequests names the request ids of reqs that are stored, after
// an insert of them hit a duplicate key (and was rolled back). When none
// is stored any more (cleaned up in between) the attempt is run again
// (mysqldb.ErrRequestVanished).
func (s *Store) duplicateRequests(ctx context.Context, reqs []ordered.Request) error {
	type scope struct{ biz, scope string }
	byScope := map[scope][]string{}
	var scopes []scope
	for _, q := range reqs {
		k := scope{q.Biz, q.Scope}
		if _, ok := byScope[k]; !ok {
			scopes = append(scopes, k)
		}
		byScope[k] = append(byScope[k], q.ID)
	}
	dup := &ordered.DuplicateRequestsError{}
	for _, k := range scopes {
		ids := byScope[k]
		found, err := s.lookupRequests(ctx, k.biz, k.scope, ids)
		if err != nil {
			return err
		}
		for _, id := range ids { // in the batch's order
			if _, ok := found[id]; ok {
				dup.Requests = append(dup.Requests, ordered.RequestKey{Biz: k.biz, Scope: k.scope, ID: id})
			}
		}
	}
	if len(dup.Requests) == 0 {
		return mysqldb.ErrRequestVanished
	}
	return dup
}

// LookupRequests returns the stored requests of biz and scope among ids
// (ordered.Store), ownedBatch ids per statement.
func (s *Store) LookupRequests(ctx context.Context, biz, scope string, ids []string) (map[string]ordered.Request, error) {
	op := fmt.Sprintf("look up %d ORDERED request ids of %q", len(ids), biz)
	if err := segment.ValidateBizName(biz); err != nil {
		return nil, fmt.Errorf("mysqlstore: %s: %w", op, err)
	}
	for _, id := range ids {
		if err := ordered.ValidateRequestID(scope, id); err != nil {
			return nil, fmt.Errorf("mysqlstore: %s: %w", op, err)
		}
	}
	cctx, cancel := s.conn.OpContext(ctx)
	defer cancel()
	out, err := s.lookupRequests(cctx, biz, scope, ids)
	if err != nil {
		return nil, s.ownedErr(ctx, op, err)
	}
	return out, nil
}

func (s *Store) lookupRequests(ctx context.Context, biz, scope string, ids []string) (map[string]ordered.Request, error) {
	out := make(map[string]ordered.Request, len(ids))
	for len(ids) > 0 {
		n := min(len(ids), ownedBatch)
		var b strings.Builder
		b.WriteString("SELECT request_id, sub_key, `count`, `first`, `last` FROM ordered_request WHERE biz = ? AND request_id IN (")
		args := make([]any, 0, 1+n)
		args = append(args, biz)
		for i, id := range ids[:n] {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString("?")
			args = append(args, []byte(segment.StoredRequestID(scope, id)))
		}
		b.WriteString(")")
		if err := scanRequests(ctx, s.conn.DB, biz, b.String(), args, out); err != nil {
			return nil, err
		}
		ids = ids[n:]
	}
	return out, nil
}

func scanRequests(ctx context.Context, q querier, biz, query string, args []any, out map[string]ordered.Request) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id, subKey []byte
			r          ordered.Request
		)
		if err := rows.Scan(&id, &subKey, &r.Count, &r.Range.First, &r.Range.Last); err != nil {
			return err
		}
		r.Scope, r.ID = segment.SplitStoredRequestID(string(id))
		r.Biz, r.SubKey = biz, string(subKey)
		out[r.ID] = r
	}
	return rows.Err()
}

// ownedErr classifies a database error like every other store call, but
// keeps the owners' own outcomes as they are: ordered.ErrFenced (wrapped
// with the operation) and *ordered.DuplicateRequestsError (unchanged), so
// errors.Is and errors.As find them.
func (s *Store) ownedErr(parent context.Context, op string, err error) error {
	var dup *ordered.DuplicateRequestsError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &dup):
		return dup
	case errors.Is(err, ordered.ErrFenced):
		return fmt.Errorf("mysqlstore: %s: %w", op, err)
	case mysqlerr.Number(err) == mysqlerr.LockWaitTimeout:
		// Another session holds the shard row: a persist in flight, or an
		// owner paused inside its transaction, which the server ends
		// within mysqldb.SessionIdleLimit. Retry soon.
		return fmt.Errorf("%w: %w", ordered.ErrShardBusy, s.conn.Classify(parent, op, err))
	}
	return s.conn.Classify(parent, op, err)
}
