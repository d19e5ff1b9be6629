// Package mysqlstore is the MySQL/MariaDB segment.Store used by idgen
// clusters: every node reserves UNORDERED segments and ORDERED ranges from
// one shared database.
//
// Schema (created and upgraded by Migrate, i.e. `idctl db migrate`):
//
//	biz              one row per business: its settings
//	segment          one row per business: max_id, the highest UNORDERED
//	                 number handed to any node
//	ordered_00..63   one row per (biz, sub_key): num, the highest ORDERED
//	                 number handed out; the table is Shard(sub_key)
//	ordered_request  ORDERED request ids and the range each one got
//	ordered_shard    the ORDERED shard owners' epochs (schema 6) and their
//	                 store-held lease nonces (schema 11); the owners'
//	                 store on these tables is ordered/mysqlstore
//	worker_cluster   snowflake settings of clusters without ZooKeeper (schema 2),
//	                 and the worker registry of every cluster: mysql or
//	                 zookeeper (schema 4)
//	worker_slot      their worker slots: holder, lease, high-water mark, gen
//	                 (protocol in package worker/mysqllease)
//	schema_version   applied migrations
//
// Reservations are single statements that MySQL executes atomically and
// durably; the new counter comes back in the OK packet through
// LAST_INSERT_ID(expr), so there is no read-modify-write and no retry loop:
//
//	UPDATE segment SET max_id = LAST_INSERT_ID(max_id + step) WHERE biz = ?
//
//	INSERT INTO ordered_NN (biz, sub_key, num)
//	SELECT name, ?, LAST_INSERT_ID(start_num - 1 + count) FROM biz WHERE name = ?
//	ON DUPLICATE KEY UPDATE num = LAST_INSERT_ID(num + count)
//
// Tested against MariaDB 10.11; the SQL is also valid on MySQL 8.
package mysqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"

	"github.com/idgen/idgen/internal/mysqldb"
	"github.com/idgen/idgen/segment"
)

// Column sizes of sub keys and request ids, in bytes; segment's limits
// (MaxSubKeyLen, MaxStoredRequestIDLen) are within them. request_id holds
// segment.StoredRequestID: the caller's id, with its scope when it has one
// (schema 7 widened it from 128 bytes).
const (
	subKeyColumnBytes    = 1024
	requestIDColumnBytes = 192
)

// Store is a segment.Store on MySQL or MariaDB. It is safe for concurrent
// use, and any number of Stores (nodes) may share one database.
type Store struct {
	db     *sql.DB
	cfg    Config
	log    *zap.Logger
	addr   string // host:port for messages
	dbName string
	dur    Durability // read by Open

	// conn is db with the call bound, conflict retry and error
	// classification that ordered/mysqlstore shares (Conn).
	conn    *mysqldb.Conn
	servers serverWatch // identity of the server behind the connections

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error
}

var (
	_ segment.Store          = (*Store)(nil)
	_ segment.ReplayReporter = (*Store)(nil)
)

// Open connects to the database, checks that the server is crash-safe
// (see Durability and Config.AcceptUnsafeDurability), checks the schema
// version (or migrates, with Config.Migrate), samples the ORDERED tables to check the shard
// mapping, and starts the background request-id cleanup. It fails when the
// database cannot be reached within Config.Timeout (the error wraps
// segment.ErrUnavailable); once open, the store reconnects by itself.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("%w: %w", segment.ErrInvalid, err)
	}
	cfg = cfg.withDefaults()
	mc, dialer, err := driverConfigMembers(cfg.DSN, cfg.Timeout, cfg.Logger)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", segment.ErrInvalid, err)
	}
	idle := mysqldb.SessionIdleLimit(cfg.Timeout)
	if !faultNoSessionIdleLimit() {
		mc.Params["wait_timeout"] = strconv.Itoa(int(idle.Seconds()))
	}
	connector, err := mysql.NewConnector(mc)
	if err != nil {
		return nil, fmt.Errorf("%w: mysqlstore: DSN: %w", segment.ErrInvalid, err)
	}
	ic := &identityConnector{Connector: connector, dialer: dialer}
	db := sql.OpenDB(ic)
	db.SetMaxOpenConns(cfg.MaxOpenConns)
	db.SetMaxIdleConns(cfg.MaxIdleConns)
	db.SetConnMaxLifetime(cfg.ConnMaxLifetime)
	// The pool retires idle connections well before the server would end
	// them (wait_timeout above), so it never hands out one the server
	// closed.
	db.SetConnMaxIdleTime(idle / 3)

	s := &Store{
		db:     db,
		cfg:    cfg,
		log:    cfg.Logger.With(zap.String("mysql", redactedDSN(mc))),
		addr:   mc.Addr,
		dbName: mc.DBName,
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	s.conn = &mysqldb.Conn{DB: db, Log: s.log, Addr: s.addr, Timeout: cfg.Timeout, MultiStatements: mc.MultiStatements}
	ic.s = s
	if err := s.start(ctx); err != nil {
		db.Close()
		return nil, err
	}
	if cfg.CleanupInterval > 0 {
		go s.cleanupLoop()
	} else {
		close(s.done)
	}
	return s, nil
}

func (s *Store) start(ctx context.Context) error {
	pctx, cancel := s.conn.OpContext(ctx)
	err := s.db.PingContext(pctx)
	cancel()
	if err != nil {
		return s.conn.Classify(ctx, "connect", err)
	}
	dctx, cancel := s.conn.OpContext(ctx)
	d, err := readDurability(dctx, s.db)
	cancel()
	if err != nil {
		return s.conn.Classify(ctx, "check durability", err)
	}
	if err := s.acceptDurability(d); err != nil {
		return err
	}
	if s.cfg.Migrate {
		// Migrations may wait for another node's; give them their own time.
		mctx, cancel := context.WithTimeout(ctx, migrateLockWait+time.Minute)
		applied, err := MigrateDB(mctx, s.db)
		cancel()
		if err != nil {
			return s.conn.Classify(ctx, "migrate", err)
		}
		for _, m := range applied {
			s.log.Info("schema migrated", zap.Int("version", m.Version), zap.String("description", m.Description))
		}
	}
	vctx, cancel := s.conn.OpContext(ctx)
	v, err := schemaVersionDB(vctx, s.db)
	cancel()
	if err != nil {
		return s.conn.Classify(ctx, "read schema version", err)
	}
	switch latest := LatestVersion(); {
	case v == 0:
		return fmt.Errorf("mysqlstore: database %q has no idgen schema: run `idctl db migrate --mysql DSN`", s.dbName)
	case v < latest:
		return fmt.Errorf("mysqlstore: database %q has schema version %d, this build needs %d: run `idctl db migrate --mysql DSN`", s.dbName, v, latest)
	case v > latest:
		s.log.Warn("schema is newer than this build (migrations are additive, continuing)",
			zap.Int("schema_version", v), zap.Int("build_version", latest))
	}
	if s.cfg.ShardCheckRows > 0 {
		cctx, cancel := context.WithTimeout(ctx, 4*s.cfg.Timeout)
		rep, err := CheckShards(cctx, s.db, s.cfg.ShardCheckRows)
		cancel()
		if err != nil {
			return s.conn.Classify(ctx, "check ORDERED shard mapping", err)
		}
		if err := rep.Err(); err != nil {
			return err
		}
	}
	return nil
}

// acceptDurability records d and applies the durability rule: an unsafe
// server is refused unless Config.AcceptUnsafeDurability, in which case
// the risk is logged at error level on every start.
func (s *Store) acceptDurability(d Durability) error {
	s.dur = d
	if err := checkDurability(d, s.cfg.AcceptUnsafeDurability); err != nil {
		return fmt.Errorf("mysqlstore: %w", err)
	}
	if !d.Safe() {
		s.log.Error("MySQL server is not crash-safe; continuing because the risk was accepted ("+AcceptUnsafeFlag+")",
			zap.String("durability", d.String()), zap.Int("innodb_flush_log_at_trx_commit", d.FlushLogAtTrxCommit),
			zap.Int("sync_binlog", d.SyncBinlog), zap.Bool("log_bin", d.LogBin))
	}
	return nil
}

// Durability returns the server's durability settings as Open read them.
func (s *Store) Durability() Durability { return s.dur }

// Close stops the cleanup and closes the connection pool.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.done
		s.closeErr = s.db.Close()
	})
	return s.closeErr
}

// Ping reports whether the database answers within Config.Timeout (for
// readiness checks); the error wraps segment.ErrUnavailable.
func (s *Store) Ping(ctx context.Context) error {
	cctx, cancel := s.conn.OpContext(ctx)
	defer cancel()
	return s.conn.Classify(ctx, "ping", s.db.PingContext(cctx))
}

// DB returns the store's connection pool (for tools and tests).
func (s *Store) DB() *sql.DB { return s.db }

// Conn returns the store's connection with its call bound, conflict retry
// and error classification: the ORDERED owners' store of the same database
// (ordered/mysqlstore.New) runs on it, so a node has one pool. Its type is
// internal to the module.
func (s *Store) Conn() *mysqldb.Conn { return s.conn }

// ConflictRetries returns how many reservation attempts were rolled back
// by a deadlock or a Galera certification conflict and tried again (by
// this store and the ORDERED owners' store on its connection).
func (s *Store) ConflictRetries() uint64 { return s.conn.ConflictRetries() }

// ReserveSegment advances the business's UNORDERED counter by step in one
// UPDATE and returns old+1 .. old+step, with the new max_id read from the
// statement's OK packet. It returns exactly what the database says, even
// when max_id went backwards (the processor refuses regressions and
// repairs the counter with RaiseSegment). A deadlock or a Galera
// certification conflict rolled the statement back; it is retried
// (mysqldb.Conn.RetryConflicts).
func (s *Store) ReserveSegment(ctx context.Context, biz string, step int64) (segment.Range, error) {
	op := fmt.Sprintf("reserve segment for %q", biz)
	if err := segment.ValidateBizName(biz); err != nil {
		return segment.Range{}, fmt.Errorf("mysqlstore: %s: %w", op, err)
	}
	if err := segment.ValidateStep(step); err != nil {
		return segment.Range{}, fmt.Errorf("mysqlstore: %s: %w", op, err)
	}
	cctx, cancel := s.conn.OpContext(ctx)
	defer cancel()
	var r segment.Range
	err := s.conn.RetryConflicts(cctx, op, func() error {
		res, err := s.db.ExecContext(cctx,
			`UPDATE segment SET max_id = LAST_INSERT_ID(max_id + ?), step = ?, updated_at = ? WHERE biz = ?`,
			step, step, mysqldb.Now(), biz)
		if err != nil {
			return err
		}
		last, ok, err := reservedFrom(res)
		if err != nil {
			return err
		}
		if !ok {
			return segment.ErrUnknownBiz
		}
		r = segment.Range{First: last - step + 1, Last: last}
		return nil
	})
	if err != nil {
		return segment.Range{}, s.conn.Classify(ctx, op, err)
	}
	return r, nil
}

// reservedFrom returns the LAST_INSERT_ID(expr) value of a reserving
// statement from its OK packet; ok is false when the statement changed no
// row (no such business).
func reservedFrom(res sql.Result) (last int64, ok bool, err error) {
	n, err := res.RowsAffected()
	if err != nil || n == 0 {
		return 0, false, err
	}
	last, err = res.LastInsertId()
	return last, err == nil, err
}

// ReserveOrdered reserves req.Count numbers for (req.Biz, req.SubKey) in
// table ordered_<Shard(SubKey)>, creating the row on first use, in one
// statement that also checks that the business exists (a locking read of
// its biz row, so a business created on any node is served at once and no
// cache can go stale).
//
// With a RequestID the reservation runs in a transaction that first
// inserts the ordered_request row (its primary key serialises concurrent
// retries of one id), then reserves, then records the range, then commits:
// a retry gets the stored range back, a retry with another sub key or
// count gets segment.ErrRequestMismatch. The row's key is the id with its
// scope (segment.StoredRequestID), so ids of different callers never meet.
//
// When the reserved range is not above req.Above (the row went backwards:
// a failover to a lagging replica lost reservations the caller saw), the
// row is raised to req.Above and reserved again, in the same transaction
// when there is a request id, so the stored range is the raised one.
func (s *Store) ReserveOrdered(ctx context.Context, req segment.OrderedRequest) (segment.Range, error) {
	r, err := s.ReserveOrderedReplay(ctx, req)
	return r.Range, err
}

// ReserveOrderedReplay is ReserveOrdered that also reports whether the
// range is the stored answer to an earlier request with the same request
// id, and whether the row was raised (segment.ReplayReporter).
func (s *Store) ReserveOrderedReplay(ctx context.Context, req segment.OrderedRequest) (segment.Reservation, error) {
	op := fmt.Sprintf("reserve ordered for %q sub key %q", req.Biz, req.SubKey)
	req, err := normalizeOrdered(req)
	if err != nil {
		return segment.Reservation{}, fmt.Errorf("mysqlstore: %s: %w", op, err)
	}
	cctx, cancel := s.conn.OpContext(ctx)
	defer cancel()
	// A deadlock rolls back everything the attempt did, so trying again
	// cannot hand out a number twice. (Concurrent retries of one request
	// id can deadlock when the first attempt rolls back; Galera aborts the
	// loser of two members' concurrent writes to one row the same way.)
	var r segment.Reservation
	err = s.conn.RetryConflicts(cctx, op, func() error {
		var err error
		if req.RequestID == "" {
			r, err = s.reserveOrderedAuto(cctx, req)
		} else {
			r, err = s.reserveOrderedOnce(cctx, req)
		}
		return err
	})
	if err != nil {
		return segment.Reservation{}, s.conn.Classify(ctx, op, err)
	}
	return r, nil
}

// reserveOrderedAuto reserves without a request id: auto-committed
// statements. A fence failure after the statement leaves the numbers as a
// gap.
func (s *Store) reserveOrderedAuto(ctx context.Context, req segment.OrderedRequest) (segment.Reservation, error) {
	r, err := s.reserveOrdered(ctx, s.db, req)
	if err != nil {
		return r, err
	}
	if req.Fence != nil {
		if err := req.Fence(); err != nil {
			return segment.Reservation{}, err
		}
	}
	return r, nil
}

// normalizeOrdered is segment.NormalizeOrderedRequest plus what Java's
// hash and the columns need.
func normalizeOrdered(req segment.OrderedRequest) (segment.OrderedRequest, error) {
	req, err := segment.NormalizeOrderedRequest(req)
	switch {
	case err != nil:
		return req, err
	case !validSubKey(req.SubKey):
		// Java would decode invalid bytes to U+FFFD before hashing; such a
		// key cannot be mapped to the Java service's table reliably.
		return req, fmt.Errorf("%w: sub_key is not valid UTF-8", segment.ErrInvalid)
	case len(req.SubKey) > subKeyColumnBytes:
		return req, fmt.Errorf("%w: sub_key is %d bytes, at most %d allowed", segment.ErrInvalid, len(req.SubKey), subKeyColumnBytes)
	case len(segment.StoredRequestID(req.RequestScope, req.RequestID)) > requestIDColumnBytes:
		return req, fmt.Errorf("%w: request_id with its scope is %d bytes, at most %d allowed", segment.ErrInvalid,
			len(segment.StoredRequestID(req.RequestScope, req.RequestID)), requestIDColumnBytes)
	}
	return req, nil
}

type execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// reserveOrdered runs the single reserving statement and, when its range
// is not above req.Above, the raising one.
func (s *Store) reserveOrdered(ctx context.Context, q execer, req segment.OrderedRequest) (segment.Reservation, error) {
	t := mysqldb.OrderedTable(Shard(req.SubKey))
	res, err := q.ExecContext(ctx,
		`INSERT INTO `+t+` (biz, sub_key, num) SELECT name, ?, LAST_INSERT_ID(?) FROM biz WHERE name = ?`+
			` ON DUPLICATE KEY UPDATE num = LAST_INSERT_ID(`+t+`.num + ?)`,
		[]byte(req.SubKey), req.StartNum-1+req.Count, req.Biz, req.Count)
	if err != nil {
		return segment.Reservation{}, err
	}
	last, ok, err := reservedFrom(res)
	if err != nil {
		return segment.Reservation{}, err
	}
	if !ok {
		return segment.Reservation{}, segment.ErrUnknownBiz
	}
	r := segment.Range{First: last - req.Count + 1, Last: last}
	if r.First > req.Above {
		return segment.Reservation{Range: r}, nil
	}
	// The row is behind what the caller saw: raise it, then reserve. The
	// first range is a gap (never answered). Conditional by GREATEST, so
	// a row another node moved further meanwhile is never lowered.
	res, err = q.ExecContext(ctx,
		`UPDATE `+t+` SET num = LAST_INSERT_ID(GREATEST(num, ?) + ?) WHERE biz = ? AND sub_key = ?`,
		req.Above, req.Count, req.Biz, []byte(req.SubKey))
	if err != nil {
		return segment.Reservation{}, err
	}
	if last, ok, err = reservedFrom(res); err != nil || !ok {
		return segment.Reservation{}, fmt.Errorf("raise ORDERED row above %d: %v (row changed: %v)", req.Above, err, ok)
	}
	return segment.Reservation{Range: segment.Range{First: last - req.Count + 1, Last: last}, Raised: true}, nil
}

func (s *Store) reserveOrderedOnce(ctx context.Context, req segment.OrderedRequest) (segment.Reservation, error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return segment.Reservation{}, err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit

	_, err = tx.ExecContext(ctx,
		"INSERT INTO ordered_request (biz, request_id, sub_key, `count`, `first`, `last`, created_at) VALUES (?, ?, ?, ?, 0, 0, ?)",
		req.Biz, storedID(req), []byte(req.SubKey), req.Count, mysqldb.Now())
	if mysqldb.IsDupEntry(err) {
		// Another attempt with this id committed first (we waited for it
		// on the primary key). Read what it got.
		if err := tx.Rollback(); err != nil {
			return segment.Reservation{}, err
		}
		r, err := s.storedRequest(ctx, req)
		return segment.Reservation{Range: r, Replayed: err == nil}, err
	}
	if err != nil {
		return segment.Reservation{}, err
	}
	r, err := s.reserveOrdered(ctx, tx, req)
	if err != nil {
		return segment.Reservation{}, err
	}
	if _, err := tx.ExecContext(ctx,
		"UPDATE ordered_request SET `first` = ?, `last` = ? WHERE biz = ? AND request_id = ?",
		r.First, r.Last, req.Biz, storedID(req)); err != nil {
		return segment.Reservation{}, err
	}
	if req.Fence != nil {
		if err := req.Fence(); err != nil {
			return segment.Reservation{}, err // rolled back: nothing stored
		}
	}
	if err := tx.Commit(); err != nil {
		return segment.Reservation{}, err
	}
	return r, nil
}

func (s *Store) storedRequest(ctx context.Context, req segment.OrderedRequest) (segment.Range, error) {
	var (
		subKey []byte
		count  int64
		r      segment.Range
	)
	err := s.db.QueryRowContext(ctx,
		"SELECT sub_key, `count`, `first`, `last` FROM ordered_request WHERE biz = ? AND request_id = ?",
		req.Biz, storedID(req)).Scan(&subKey, &count, &r.First, &r.Last)
	if errors.Is(err, sql.ErrNoRows) {
		return segment.Range{}, mysqldb.ErrRequestVanished
	}
	if err != nil {
		return segment.Range{}, err
	}
	if string(subKey) != req.SubKey || count != req.Count {
		return segment.Range{}, segment.RequestMismatch()
	}
	if r.First < 1 || r.Len() != count {
		return segment.Range{}, fmt.Errorf("request id %q has a corrupt stored range %d..%d", req.RequestID, r.First, r.Last)
	}
	return r, nil
}

// storedID is the ordered_request key of req's request id.
func storedID(req segment.OrderedRequest) []byte {
	return []byte(segment.StoredRequestID(req.RequestScope, req.RequestID))
}
