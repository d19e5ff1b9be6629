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
// The owners' leases are held here too (ordered.LeaseStore; the protocol
// is in ordered/storelease.go): ordered_shard.lease_nonce (schema 11) is
// a random nonce that the owner's renewals (RenewLease) rewrite in the
// rows of the shards it serves, where epoch and owner are still its own;
// every Claim writes a fresh one and a WriteBack clears it in its fenced
// statement. A taker claims with ClaimObserved, which refuses in the
// claim's transaction when the nonce changed since the taker saw it. A
// renewal is an UPDATE, not a read, for the same reason as the fence: on
// Galera a read lock is local to one member, while a renewal and a claim
// that write one row on two members are certified against each other,
// so one of them is rolled back (and retried: then the renewal finds the
// new epoch and renews nothing, or the claim finds the new nonce and is
// refused) instead of both committing. Nonces are 16 random bytes, never
// a counter: a lossy failover puts older rows back, and a counter could
// then come back to a value a taker saw and pass for unchanged.
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
	"crypto/rand"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
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

var (
	_ ordered.Store      = (*Store)(nil)
	_ ordered.LeaseStore = (*Store)(nil)
)

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
// above epoch, and record epoch, owner and a fresh lease nonce. Claiming
// the stored epoch again succeeds (a retried claim, or an owner restoring
// an epoch a lossy failover lost). The row lock makes a Claim wait for
// the shard's persists and lease renewals in flight: they hold it from
// their first statement to their commit.
func (s *Store) Claim(ctx context.Context, shard int, epoch int64, owner string) error {
	return s.claim(ctx, shard, epoch, owner, nil)
}

// ClaimObserved is Claim over an observed lease nonce
// (ordered.LeaseStore): in the same transaction, after the row is
// locked and its epoch checked (a *ordered.FencedError comes first), it
// refuses with ordered.ErrLeaseRenewed, rolling back (so nothing
// changed), when the row's nonce is not observed. A shard without a row
// has the nonce "": observed "" claims it, any other is refused. A row
// already at epoch and owner is a retry of this claim, which passed the
// check when it committed (its own fresh nonce is there now): it
// succeeds like Claim's retry.
func (s *Store) ClaimObserved(ctx context.Context, shard int, epoch int64, owner, observed string) error {
	return s.claim(ctx, shard, epoch, owner, &observed)
}

// claim is Claim, and ClaimObserved when observed is not nil.
func (s *Store) claim(ctx context.Context, shard int, epoch int64, owner string, observed *string) error {
	op := fmt.Sprintf("claim ORDERED shard %d at epoch %d", shard, epoch)
	if observed != nil {
		op = fmt.Sprintf("claim ORDERED shard %d at epoch %d over lease nonce %q", shard, epoch, *observed)
	}
	if err := ordered.ValidateShard(shard); err != nil {
		return fmt.Errorf("mysqlstore: %s: %w", op, err)
	}
	if epoch < 0 {
		return fmt.Errorf("mysqlstore: %s: %w: negative epoch (epochs come from the coordinator and start at 0)", op, segment.ErrInvalid)
	}
	owner = mysqldb.OwnerColumn(owner)
	cctx, cancel := s.conn.OpContext(ctx)
	defer cancel()
	err := s.conn.RetryConflicts(cctx, op, func() error { return s.claimOnce(cctx, shard, epoch, owner, observed) })
	return s.ownedErr(ctx, op, err)
}

// newLeaseNonce returns a fresh lease nonce: 16 random bytes as 32 hex
// characters (the width of ordered_shard.lease_nonce). Random, never a
// counter (see the package doc).
func newLeaseNonce() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// leaseRenewed is the ErrLeaseRenewed refusal of a ClaimObserved.
func leaseRenewed(shard int, stored, observed string) error {
	return fmt.Errorf("%w: shard %d holds lease nonce %q, not the %q observed: its owner renewed its lease in the store since, so it is alive; nothing changed: give the shard up and look again",
		ordered.ErrLeaseRenewed, shard, stored, observed)
}

func (s *Store) claimOnce(ctx context.Context, shard int, epoch int64, owner string, observed *string) error {
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
	nonce := newLeaseNonce()
	res, err := tx.ExecContext(ctx,
		`INSERT INTO ordered_shard (shard, epoch, owner, persists, lease_nonce, updated_at) VALUES (?, ?, ?, 0, ?, ?)`+
			` ON DUPLICATE KEY UPDATE shard = shard`, shard, epoch, owner, nonce, at)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 1 {
		// No row was there: its nonce was "". The deferred rollback
		// takes the insert back when the claim is refused.
		if observed != nil && *observed != "" {
			return fmt.Errorf("%w: shard %d has no row (its nonce is empty), not the nonce %q observed (a lossy failover lost the row?); nothing changed: give the shard up and look again",
				ordered.ErrLeaseRenewed, shard, *observed)
		}
		return tx.Commit()
	}
	var (
		stored      int64
		storedOwner string
		storedNonce string
	)
	if err := tx.QueryRowContext(ctx, `SELECT epoch, owner, lease_nonce FROM ordered_shard WHERE shard = ? FOR UPDATE`, shard).
		Scan(&stored, &storedOwner, &storedNonce); err != nil {
		return err
	}
	if stored > epoch || (stored == epoch && storedOwner != owner) {
		// Equal epochs of two owners: two coordinators hand out epochs
		// for one database (two clusters on it, or a ZooKeeper that lost
		// its records); each epoch may have one claimer only.
		return fmt.Errorf("%w: shard %d is at epoch %d (owner %q), not below %d: a newer owner claimed it; give the shard up",
			&ordered.FencedError{Shard: shard, Epoch: epoch, Stored: stored}, shard, stored, storedOwner, epoch)
	}
	if observed != nil && stored != epoch && storedNonce != *observed {
		return leaseRenewed(shard, storedNonce, *observed)
	}
	if _, err := tx.ExecContext(ctx, `UPDATE ordered_shard SET epoch = ?, owner = ?, lease_nonce = ?, updated_at = ? WHERE shard = ?`,
		epoch, owner, nonce, at, shard); err != nil {
		return err
	}
	return tx.Commit()
}

// RenewLease writes one fresh nonce into the rows of shards whose epoch
// and owner are still the caller's and whose lease was not cleared by a
// hand-off (ordered.LeaseStore), and returns the
// shards it wrote, ascending. One statement, committed on its own (one
// round trip, the renewal runs every third of a lease):
//
//	UPDATE ordered_shard SET lease_nonce = ? WHERE shard IN (...)
//	  AND owner = ? AND lease_nonce <> '' AND epoch = CASE shard WHEN ? THEN ? ... END
//
// Its rows are found by primary key in ascending order, like the fence of
// a group commit, so a renewal and a group commit of the same node never
// deadlock each other; a Claim waits for it on the row lock. The nonce is
// fresh, so every row it found changed and its count is the number of
// shards renewed: when that falls short (a shard was claimed over), one
// SELECT names the rows that hold the nonce. That read runs after the
// commit: it can only miss a renewed shard (claimed over since, or read
// on a Galera member that has not applied the renewal yet), never name
// one that was not renewed; a shard missing from the answer fails the
// caller's renewal, which is the safe side. A conflict rolled the
// statement back and it runs again with a fresh nonce, bounded by ctx.
// Empty shards: no statement.
func (s *Store) RenewLease(ctx context.Context, owner string, shards []ordered.ShardEpoch) ([]int, error) {
	op := fmt.Sprintf("renew the ORDERED lease of %d shards", len(shards))
	if len(shards) == 0 {
		return nil, nil
	}
	sorted := slices.Clone(shards)
	slices.SortFunc(sorted, func(a, b ordered.ShardEpoch) int { return a.Shard - b.Shard })
	for i, se := range sorted {
		if err := ordered.ValidateShard(se.Shard); err != nil {
			return nil, fmt.Errorf("mysqlstore: %s: %w", op, err)
		}
		if se.Epoch < 0 {
			return nil, fmt.Errorf("mysqlstore: %s: %w: shard %d: negative epoch", op, segment.ErrInvalid, se.Shard)
		}
		if i > 0 && sorted[i-1].Shard == se.Shard {
			return nil, fmt.Errorf("mysqlstore: %s: %w: shard %d given twice", op, segment.ErrInvalid, se.Shard)
		}
	}
	owner = mysqldb.OwnerColumn(owner)
	cctx, cancel := s.conn.OpContext(ctx)
	defer cancel()
	var renewed []int
	err := s.conn.RetryConflicts(cctx, op, func() error {
		var err error
		renewed, err = s.renewOnce(cctx, owner, sorted)
		return err
	})
	if err != nil {
		return nil, s.ownedErr(ctx, op, err)
	}
	return renewed, nil
}

func (s *Store) renewOnce(ctx context.Context, owner string, shards []ordered.ShardEpoch) ([]int, error) {
	nonce := newLeaseNonce()
	var b strings.Builder
	b.WriteString(`UPDATE ordered_shard SET lease_nonce = ? WHERE `)
	args := shardsIn(&b, []any{nonce}, shards)
	b.WriteString(` AND owner = ? AND lease_nonce <> '' AND `)
	args = epochCase(&b, append(args, owner), shards)
	res, err := s.conn.DB.ExecContext(ctx, b.String(), args...)
	if err != nil {
		return nil, err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return nil, err
	}
	switch {
	case n == int64(len(shards)):
		all := make([]int, len(shards))
		for i, se := range shards {
			all[i] = se.Shard
		}
		return all, nil
	case n == 0:
		return nil, nil
	}
	var q strings.Builder
	q.WriteString(`SELECT shard FROM ordered_shard WHERE lease_nonce = ? AND `)
	qargs := shardsIn(&q, []any{nonce}, shards)
	q.WriteString(" ORDER BY shard")
	rows, err := s.conn.DB.QueryContext(ctx, q.String(), qargs...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var renewed []int
	for rows.Next() {
		var sh int
		if err := rows.Scan(&sh); err != nil {
			return nil, err
		}
		renewed = append(renewed, sh)
	}
	return renewed, rows.Err()
}

// LeaseNonces returns every shard's lease nonce (ordered.LeaseStore): one
// SELECT of every row, "" for a shard without one.
func (s *Store) LeaseNonces(ctx context.Context) ([]string, error) {
	const op = "read the ORDERED lease nonces"
	cctx, cancel := s.conn.OpContext(ctx)
	defer cancel()
	out := make([]string, segment.OrderedShards)
	err := func() error {
		rows, err := s.conn.DB.QueryContext(cctx, `SELECT shard, lease_nonce FROM ordered_shard`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				shard int
				nonce string
			)
			if err := rows.Scan(&shard, &nonce); err != nil {
				return err
			}
			if shard >= 0 && shard < len(out) {
				out[shard] = nonce
			}
		}
		return rows.Err()
	}()
	if err != nil {
		return nil, s.ownedErr(ctx, op, err)
	}
	return out, nil
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
	if fenced, err := s.fence(ctx, tx, []ordered.ShardEpoch{{Shard: shard, Epoch: epoch}}, false); err != nil {
		return err
	} else if fenced != nil {
		return fenced[shard]
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

// Persist is PersistShards with one part (ordered.Store).
func (s *Store) Persist(ctx context.Context, shard int, epoch int64, rows []ordered.Row, reqs []ordered.Request) error {
	return ordered.PersistOne(ctx, s, shard, epoch, rows, reqs)
}

// PersistShards raises the rows of several shards and inserts their
// request ids in one transaction, each part conditional on its shard's
// epoch (ordered.Store): the node's group commit across shards. One
// round trip, however many shards: one Exec of START TRANSACTION, the
// fencing UPDATE of every part's ordered_shard row, the multi-row INSERT
// of every part's request ids (per ownedBatch), one multi-row upsert per
// shard table (the rows of a shard live in its own table), with a check
// right after the fence that stops the Exec when a part is fenced, and
// COMMIT (mysqldb.Conn.ExecJoined; writeShardsOnce). Nothing else is read
// or written on the way.
//
// The fencing UPDATE comes first: it holds every part's shard row until
// the commit, so the rest can neither race a Claim nor a deposed owner.
// When it counts fewer rows than parts, the check stops the Exec before
// its COMMIT, one SELECT names the parts whose epoch is not theirs: they
// fail with ordered.ErrFenced, the transaction is rolled back and runs
// again without them. Request
// ids come before the rows: a duplicate rolls the transaction back before
// any row was written, one SELECT per business names the stored ids, the
// parts holding them fail with *ordered.DuplicateRequestsError, and the
// transaction runs again without them. The rows are upserted with ON
// DUPLICATE KEY UPDATE num = GREATEST(num, VALUES(num)): a persist never
// lowers a row, so persists of one shard may commit in any order
// (WriteBack is the one that lowers). A deadlock or a Galera
// certification conflict rolled the whole transaction back and it is run
// again (mysqldb.Conn.RetryConflicts).
func (s *Store) PersistShards(ctx context.Context, parts []ordered.ShardWrite) ([]error, error) {
	nrows, nreqs := 0, 0
	for _, p := range parts {
		nrows, nreqs = nrows+len(p.Rows), nreqs+len(p.Reqs)
	}
	op := fmt.Sprintf("persist %d ORDERED rows and %d request ids of %d shards", nrows, nreqs, len(parts))
	if len(parts) == 1 {
		op = fmt.Sprintf("persist %d ORDERED rows and %d request ids of shard %d at epoch %d", nrows, nreqs, parts[0].Shard, parts[0].Epoch)
	}
	errs, err := ordered.ValidateShardWrites(parts)
	if err != nil {
		return nil, fmt.Errorf("mysqlstore: %s: %w", op, err)
	}
	var ws []shardWrite
	for i, p := range parts {
		if errs[i] != nil {
			errs[i] = fmt.Errorf("mysqlstore: %s: shard %d: %w", op, p.Shard, errs[i])
			continue
		}
		ws = append(ws, shardWrite{part: i, shard: p.Shard, epoch: p.Epoch, reqs: p.Reqs, rowStmts: rowUpserts(p.Shard, p.Rows, false)})
	}
	if err := s.writeShards(ctx, op, ws, errs, false, nil); err != nil {
		return nil, err
	}
	return errs, nil
}

// WriteBack sets rows to their numbers exactly, in one transaction
// conditional on the shard's epoch (ordered.Store): the same fencing
// UPDATE first, then upserts with ON DUPLICATE KEY UPDATE num =
// VALUES(num), which may lower a row. A planned hand-off writes back the
// exact counters over its unused reservations, so the next owner
// continues without a gap; only the epoch's holder can, and its persists
// are done by then. The fence also clears the shard's lease nonce: the
// owner stopped answering before its write-back, so the next owner need
// not wait for its lease (ordered.LeaseStore).
func (s *Store) WriteBack(ctx context.Context, shard int, epoch int64, rows []ordered.Row) error {
	return s.WriteBackGated(ctx, shard, epoch, rows, nil)
}

// WriteBackGated is WriteBack with check run on each attempt's session
// after it reached its server, before any statement
// (ordered.GatedWriteBacker): a new session that reaches another server
// has told OnServerChange (the failover gate) by then, so check sees the
// change and nothing is written on the new server. check nil: WriteBack.
func (s *Store) WriteBackGated(ctx context.Context, shard int, epoch int64, rows []ordered.Row, check func() error) error {
	op := fmt.Sprintf("write back %d ORDERED rows of shard %d at epoch %d", len(rows), shard, epoch)
	if err := ordered.ValidatePersist(shard, rows, nil); err != nil {
		return fmt.Errorf("mysqlstore: %s: %w", op, err)
	}
	errs := make([]error, 1)
	if err := s.writeShards(ctx, op, []shardWrite{{shard: shard, epoch: epoch, rowStmts: rowUpserts(shard, rows, true)}}, errs, true, check); err != nil {
		return err
	}
	if errs[0] != nil {
		return s.ownedErr(ctx, op, errs[0])
	}
	return nil
}

// shardWrite is one shard's part of a fenced write, its row statements
// built once (a retried attempt sends the same ones).
type shardWrite struct {
	part     int // index in the caller's parts (and errs)
	shard    int
	epoch    int64
	reqs     []ordered.Request
	rowStmts []mysqldb.Stmt
}

// writeShards runs the fenced transaction of ws with retries and the
// owners' error rules: a part that fails alone gets its error in
// errs[part]; the error returned fails them all. clearLease makes the
// fence clear the shards' lease nonces too (WriteBack). check, when set,
// runs on each transaction's session before its first statement
// (WriteBackGated); its error fails them all.
func (s *Store) writeShards(ctx context.Context, op string, ws []shardWrite, errs []error, clearLease bool, check func() error) error {
	cctx, cancel := s.conn.OpContext(ctx)
	defer cancel()
	err := s.conn.RetryConflicts(cctx, op, func() error {
		for _, w := range ws {
			errs[w.part] = nil // an earlier attempt's refusals are read again
		}
		live := ws
		for len(live) > 0 {
			var (
				done bool
				err  error
			)
			live, done, err = s.writeShardsOnce(cctx, live, errs, clearLease, check)
			if err != nil || done {
				return err
			}
		}
		return nil
	})
	for _, w := range ws {
		if errs[w.part] != nil {
			errs[w.part] = s.ownedErr(ctx, op, errs[w.part])
		}
	}
	return s.ownedErr(ctx, op, err)
}

// writeShardsOnce is one transaction of live. done: it committed (or had
// nothing left to write); else it was rolled back because some parts are
// fenced or hold stored request ids: those parts have their errors, and
// the rest is returned to run again.
//
// One round trip where the pool allows (mysqldb.Conn.ExecJoined, on a
// session of its own: the transaction is opened and committed by the
// statements, not by database/sql): START TRANSACTION; the fence; the
// check; the request ids; the rows; COMMIT: six statements. The fence
// comes first, so the transaction holds every shard row whose epoch is
// the caller's from its first statement to its end (a Claim waits for
// it); it adds 1 to persists, so it changes every row it finds and its
// count is the number of parts at their epoch. The check (checkStmts)
// fails with ER_SUBQUERY_NO_1_ROW when that count falls short, and the
// server stops there, before any request id or row is written and before
// the COMMIT: the transaction is still open, one SELECT names the fenced
// shards, it is rolled back and run again without their parts. The
// request ids come
// before the rows: the server stops at a duplicate id, before any row is
// written and before the COMMIT; the fenced parts are named first (as a
// fenced part is refused as fenced, whatever else), then the rollback,
// and the parts holding stored ids fail with
// *ordered.DuplicateRequestsError. So the happy path costs one round
// trip and each refusal a few more.
func (s *Store) writeShardsOnce(ctx context.Context, live []shardWrite, errs []error, clearLease bool, check func() error) (rest []shardWrite, done bool, err error) {
	tx, err := s.begin(ctx)
	if err != nil {
		return nil, false, err
	}
	defer tx.end(ctx) //nolint:errcheck // a failed rollback discarded the session
	if check != nil {
		// The session has its connection (DB.Conn opens one when the
		// pool has none), and a new connection told OnServerChange of its
		// server before it was handed out: check sees a failover it found.
		if err := check(); err != nil {
			return nil, false, err
		}
	}
	fences := make([]ordered.ShardEpoch, len(live))
	var reqs []ordered.Request
	stall := false
	for i, w := range live {
		fences[i] = ordered.ShardEpoch{Shard: w.shard, Epoch: w.epoch}
		reqs = append(reqs, w.reqs...)
		stall = stall || faultStalls(w.shard)
	}
	anyEpoch := s.ignoreEpoch.Load()
	set := "persists = persists + 1"
	if clearLease {
		set += ", lease_nonce = ''"
	}
	stmts := []mysqldb.Stmt{{SQL: "START TRANSACTION"}, fenceStmt(fences, anyEpoch, set)}
	stmts = append(stmts, checkStmts(len(fences))...)
	stmts = append(stmts, mysqldb.RequestInserts(reqs, mysqldb.Now(), "")...)
	for _, w := range live {
		stmts = append(stmts, w.rowStmts...)
	}
	if !stall {
		stmts = append(stmts, mysqldb.Stmt{SQL: "COMMIT"})
	}
	_, err = s.conn.ExecJoined(ctx, tx.conn, stmts)
	switch {
	case mysqldb.IsDupEntry(err):
		var fenced map[int]error
		if !anyEpoch {
			if fenced, err = s.epochErrs(ctx, tx.conn, fences); err != nil {
				return nil, false, err
			}
		}
		if err := tx.end(ctx); err != nil {
			return nil, false, err
		}
		if len(fenced) > 0 {
			// The stored id may be a fenced part's: run again without
			// the fenced parts first.
			live = dropFenced(live, fenced, errs)
			return live, len(live) == 0, nil
		}
		return s.dropDuplicates(ctx, live, reqs, errs)
	case mysqlerr.Number(err) == subqueryRows:
		fenced, err := s.fencedAfterShortCount(ctx, tx.conn, fences)
		if err != nil {
			return nil, false, err
		}
		if err := tx.end(ctx); err != nil {
			return nil, false, err
		}
		live = dropFenced(live, fenced, errs)
		return live, len(live) == 0, nil
	case err != nil:
		return nil, false, err
	}
	if stall {
		// Fault injection only: the stall runs inside the open
		// transaction, after the fence, so the commit is a round trip
		// of its own here.
		for _, w := range live {
			faultAfterFence(s, w.shard)
		}
		if _, err := tx.conn.ExecContext(ctx, "COMMIT"); err != nil {
			return nil, false, err
		}
	}
	tx.open = false
	return nil, true, nil
}

// subqueryRows is ER_SUBQUERY_NO_1_ROW, the error checkStmts raises on
// purpose (no statement of the store raises it otherwise).
const subqueryRows = 1242

// checkStmts fail with ER_SUBQUERY_NO_1_ROW when the statement before
// them (the fence) changed fewer than n rows, and do nothing
// otherwise: a multi-statement Exec stops at the first failing statement,
// so a COMMIT after them runs only when every part's shard is at its
// epoch. A scalar subquery of two rows is the one failure plain SQL can
// raise on a condition in both MariaDB and MySQL 8 without a stored
// program (SIGNAL needs one); SELECT ... INTO sends no result set.
// ROW_COUNT() in it is the fence's (the statement before), so the
// check is one statement: every statement is server CPU in each commit,
// which shares the cores with the RPC path (BENCHMARKS.md).
func checkStmts(n int) []mysqldb.Stmt {
	return []mysqldb.Stmt{
		{SQL: "SELECT (SELECT v FROM (SELECT 1 AS v UNION ALL SELECT 2) AS two WHERE ROW_COUNT() <> ?) INTO @idgen_fence_check", Args: []any{n}},
	}
}

// sessionTx is a transaction opened by a statement (START TRANSACTION)
// on a session of its own, so that it can be opened, written and
// committed in one round trip, which database/sql's Tx cannot (its
// BeginTx is a round trip of its own).
type sessionTx struct {
	conn *sql.Conn // nil once given back
	open bool      // may hold an open transaction: end rolls it back
}

func (s *Store) begin(ctx context.Context) (*sessionTx, error) {
	c, err := s.conn.DB.Conn(ctx)
	if err != nil {
		return nil, err
	}
	return &sessionTx{conn: c, open: true}, nil
}

// end rolls back what may still be open and gives the session back to
// the pool at once (the refusals' reads that follow may need it: the pool
// may have one session only). A session whose ROLLBACK failed is
// discarded, never given back: it may still hold the transaction and its
// locks. Ending twice does nothing.
func (t *sessionTx) end(ctx context.Context) error {
	if t.conn == nil {
		return nil
	}
	var err error
	if t.open {
		if _, err = t.conn.ExecContext(ctx, "ROLLBACK"); err != nil {
			t.conn.Raw(func(any) error { return driver.ErrBadConn }) //nolint:errcheck // discards the session
		}
		t.open = false
	}
	t.conn.Close() //nolint:errcheck // back to the pool (or closed, if discarded)
	t.conn = nil
	return err
}

// dropFenced sets the errors of the parts of live whose shard is in fenced
// and returns the others.
func dropFenced(live []shardWrite, fenced map[int]error, errs []error) []shardWrite {
	if len(fenced) == 0 {
		return live
	}
	kept := make([]shardWrite, 0, len(live))
	for _, w := range live {
		if ferr := fenced[w.shard]; ferr != nil {
			errs[w.part] = ferr
			continue
		}
		kept = append(kept, w)
	}
	return kept
}

// dropDuplicates fails the parts of live whose request ids are stored
// (after an insert of reqs hit a duplicate key and was rolled back) with
// a *ordered.DuplicateRequestsError each, and returns the others.
func (s *Store) dropDuplicates(ctx context.Context, live []shardWrite, reqs []ordered.Request, errs []error) ([]shardWrite, bool, error) {
	err := s.duplicateRequests(ctx, reqs)
	var dup *ordered.DuplicateRequestsError
	if !errors.As(err, &dup) {
		return nil, false, err
	}
	stored := make(map[ordered.RequestKey]struct{}, len(dup.Requests))
	for _, rk := range dup.Requests {
		stored[rk] = struct{}{}
	}
	rest := make([]shardWrite, 0, len(live))
	for _, w := range live {
		var mine []ordered.RequestKey
		for _, q := range w.reqs {
			if rk := (ordered.RequestKey{Biz: q.Biz, Scope: q.Scope, ID: q.ID}); hasKey(stored, rk) {
				mine = append(mine, rk)
			}
		}
		if len(mine) > 0 {
			errs[w.part] = &ordered.DuplicateRequestsError{Requests: mine}
			continue
		}
		rest = append(rest, w)
	}
	return rest, false, nil
}

func hasKey(m map[ordered.RequestKey]struct{}, k ordered.RequestKey) bool {
	_, ok := m[k]
	return ok
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

// fence runs the fencing UPDATE (fenceStmt) alone and reads its count
// (fenceCount): Load's first statement.
func (s *Store) fence(ctx context.Context, tx *sql.Tx, shards []ordered.ShardEpoch, unsafeAnyEpoch bool) (fenced map[int]error, err error) {
	st := fenceStmt(shards, unsafeAnyEpoch, "persists = persists + 1")
	res, err := tx.ExecContext(ctx, st.SQL, st.Args...)
	if err != nil {
		return nil, err
	}
	return s.fenceCount(ctx, tx, res, shards)
}

// fenceStmt is the first statement of every owner transaction: one UPDATE
// of every shard whose stored epoch is the caller's (set: how it counts
// the write in ordered_shard.persists, and for a write-back the cleared
// lease nonce), which both checks the epochs and
// holds the shard rows' locks until the transaction ends (the rows are
// found by primary key, in key order, so two fences never deadlock each
// other). unsafeAnyEpoch drops the condition (UnsafeIgnoreEpoch, fault
// injection's negative control only).
func fenceStmt(shards []ordered.ShardEpoch, unsafeAnyEpoch bool, set string) mysqldb.Stmt {
	var b strings.Builder
	b.WriteString(`UPDATE ordered_shard SET ` + set + ` WHERE `)
	args := shardsIn(&b, make([]any, 0, 3*len(shards)+1), shards)
	b.WriteString(` AND (? OR `)
	args = epochCase(&b, append(args, unsafeAnyEpoch), shards)
	b.WriteString(")")
	return mysqldb.Stmt{SQL: b.String(), Args: args}
}

// shardsIn writes the condition "shard IN (?, ...)" of shards to b and
// returns args with their numbers appended.
func shardsIn(b *strings.Builder, args []any, shards []ordered.ShardEpoch) []any {
	b.WriteString("shard IN (")
	for i, se := range shards {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("?")
		args = append(args, se.Shard)
	}
	b.WriteString(")")
	return args
}

// epochCase writes the condition that each shard's stored epoch is its
// Epoch, "epoch = CASE shard WHEN ? THEN ? ... END", to b and returns
// args with its arguments appended.
func epochCase(b *strings.Builder, args []any, shards []ordered.ShardEpoch) []any {
	b.WriteString("epoch = CASE shard")
	for _, se := range shards {
		b.WriteString(" WHEN ? THEN ?")
		args = append(args, se.Shard, se.Epoch)
	}
	b.WriteString(" END")
	return args
}

// fenceCount reads the count of a fenceStmt (res: its own): fenced
// names the shards whose epoch is not the caller's, read only when the
// count falls short (the rare path).
func (s *Store) fenceCount(ctx context.Context, q querier, res sql.Result, shards []ordered.ShardEpoch) (fenced map[int]error, err error) {
	if n, err := res.RowsAffected(); err != nil {
		return nil, err
	} else if n == int64(len(shards)) {
		return nil, nil
	}
	return s.fencedAfterShortCount(ctx, q, shards)
}

// fencedAfterShortCount names the fenced shards after a fence (in the
// transaction of q) counted fewer rows than shards.
func (s *Store) fencedAfterShortCount(ctx context.Context, q querier, shards []ordered.ShardEpoch) (map[int]error, error) {
	fenced, err := s.epochErrs(ctx, q, shards)
	if err != nil {
		return nil, err
	}
	if len(fenced) == 0 {
		// The count fell short but every epoch reads as the caller's: a
		// row changed between the two statements, which the locks rule
		// out. Refuse them all rather than guess which one.
		for _, se := range shards {
			fenced[se.Shard] = fmt.Errorf("%w: shard %d left epoch %d meanwhile; claim it again", ordered.ErrFenced, se.Shard, se.Epoch)
		}
	}
	return fenced, nil
}

// epochErrs reads whose the shards are, after their fence in tx (whose
// scan locked every row it read, so this sees what the fence saw): the
// ordered.ErrFenced error of each shard whose epoch is not the caller's,
// saying whose it is.
func (s *Store) epochErrs(ctx context.Context, q querier, shards []ordered.ShardEpoch) (map[int]error, error) {
	stored, err := s.readEpochs(ctx, q, shards)
	if err != nil {
		return nil, err
	}
	fenced := map[int]error{}
	for _, se := range shards {
		st, ok := stored[se.Shard]
		if !ok {
			fenced[se.Shard] = fmt.Errorf("%w: shard %d was never claimed: Claim it before loading or persisting", ordered.ErrFenced, se.Shard)
		} else if err := fencedUnless(se.Shard, se.Epoch, st.epoch, st.owner); err != nil {
			fenced[se.Shard] = err
		}
	}
	return fenced, nil
}

type storedEpoch struct {
	epoch int64
	owner string
}

// readEpochs reads the stored epoch and owner of shards (absent: never
// claimed), locking their rows.
func (s *Store) readEpochs(ctx context.Context, q querier, shards []ordered.ShardEpoch) (map[int]storedEpoch, error) {
	var b strings.Builder
	b.WriteString(`SELECT shard, epoch, owner FROM ordered_shard WHERE `)
	args := shardsIn(&b, make([]any, 0, len(shards)), shards)
	b.WriteString(" FOR UPDATE")
	rows, err := q.QueryContext(ctx, b.String(), args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := make(map[int]storedEpoch, len(shards))
	for rows.Next() {
		var (
			shard int
			st    storedEpoch
		)
		if err := rows.Scan(&shard, &st.epoch, &st.owner); err != nil {
			return nil, err
		}
		out[shard] = st
	}
	return out, rows.Err()
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
	case errors.Is(err, ordered.ErrFenced), errors.Is(err, ordered.ErrLeaseRenewed):
		return fmt.Errorf("mysqlstore: %s: %w", op, err)
	case mysqlerr.Number(err) == mysqlerr.LockWaitTimeout:
		// Another session holds the shard row: a persist in flight, or an
		// owner paused inside its transaction, which the server ends
		// within mysqldb.SessionIdleLimit. Retry soon.
		return fmt.Errorf("%w: %w", ordered.ErrShardBusy, s.conn.Classify(parent, op, err))
	}
	return s.conn.Classify(parent, op, err)
}
