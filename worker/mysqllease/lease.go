// Package mysqllease holds snowflake worker slots in MySQL, for clusters
// that run with --mysql and no ZooKeeper: without it every such node would
// take worker 0 and two nodes would issue the same IDs.
//
// It keeps the invariant of package worker (a slot's next holder issues
// only timestamps above every timestamp an earlier holder may issue) with
// the same three rules as the ZooKeeper lease, on two tables created by
// segment/mysqlstore's migrations 2 and 4:
//
//	worker_cluster  one row per cluster: epoch_ms, idc_bits, node_bits, created_ms,
//	                registry (where the cluster holds its slots; see registry.go)
//	worker_slot     one row per (cluster, idc, node) ever used: holder (a random
//	                id per lease instance, NULL when free), lease_until_ms (the
//	                database's clock), high_water_ms (the holder's clock), gen
//
// The rules:
//
//  1. The holder issues no timestamp above the mark it has durably written:
//     Holder.Extended is called only after the UPDATE that wrote the mark
//     committed, and the generator's ceiling refuses beyond it.
//  2. Every write to a slot row is conditional on holder = this instance
//     AND gen = the gen this instance last wrote (gen grows on every
//     write). A late write (a paused process, a reply lost in a network
//     partition) after another node took the slot changes nothing, so it
//     cannot lower the successor's mark; the late writer sees 0 rows and
//     fences.
//  3. A node takes a slot in one transaction that locks the cluster row
//     and the IDC's slot rows (SELECT ... FOR UPDATE) and hands the slot to
//     its holder with NotBefore = the slot's recorded mark: the holder
//     refuses until its clock is past it.
//
// A connection error is not a loss of the slot: the node keeps serving up
// to its durable mark (OutageTolerance at least) and retries; it fences
// only when the database says the slot is someone else's. The lease's time
// to live runs in the database's clock, so an expiry does not depend on any
// node's clock; it is Lead plus twice the allowed skew, so the mark of a
// crashed holder has passed when its lease expires.
package mysqllease

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/idgen/idgen/clock"
	"github.com/idgen/idgen/worker"
)

// Lease is a worker slot held in MySQL. Its methods are safe for
// concurrent use.
type Lease struct {
	cfg     Config
	log     *zap.Logger
	id      string // holder column value of this instance
	pid     int
	started int64 // Unix ms, local clock
	meta    worker.Meta
	lead    time.Duration
	ttl     time.Duration

	stop   chan struct{}
	done   chan struct{}
	extend chan struct{} // RequestExtend's poke (buffer 1)
	cancel context.CancelFunc
	ctx    context.Context // the heartbeat's; cancelled by Close
	once   sync.Once
	err    error

	// mu guards the fields below; the heartbeat goroutine writes them.
	mu      sync.Mutex
	state   worker.State
	slot    worker.Slot
	hasSlot bool
	gen     int64 // gen of the slot row after this instance's last write
	hw      int64 // highest mark durably written for the slot
	beatAt  time.Time
	offset  time.Duration // local clock minus the database's, at the last measure
	down    bool          // in an episode of failed heartbeats (logged once)
	full    bool          // in an episode of failed re-claims (logged once)
	// pending is a claim whose commit's outcome is unknown: if the row
	// turns out to be ours, it is adopted with this NotBefore.
	pending *pendingClaim
}

type pendingClaim struct {
	node      int
	notBefore int64
}

var _ worker.Lease = (*Lease)(nil)

// Register checks the node's clock against the database's, creates or
// checks the cluster's settings, takes a free slot of the IDC (see claim)
// and hands it to the Holder; then it renews the slot's mark and lease
// every HeartbeatInterval until Close. It refuses with an error naming the
// cause and the fix: clock skew, a cluster whose slots are held in
// ZooKeeper or that is being migrated (ErrRegistryMismatch), settings that
// differ from the cluster's, every slot of the IDC held, the worker tables
// missing.
func Register(ctx context.Context, cfg Config) (*Lease, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	id, err := newInstanceID()
	if err != nil {
		return nil, fmt.Errorf("instance id: %w", err)
	}
	hctx, cancel := context.WithCancel(context.Background())
	l := &Lease{
		cfg:     cfg,
		log:     cfg.Logger.With(zap.String("cluster", cfg.Cluster), zap.Int("idc", cfg.IDC), zap.String("holder", id)),
		id:      id,
		pid:     os.Getpid(),
		started: clock.Millis(cfg.Clock),
		lead:    cfg.Lead(),
		ttl:     cfg.TTL(),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
		extend:  make(chan struct{}, 1),
		cancel:  cancel,
		ctx:     hctx,
		state:   worker.StateNone,
	}
	if err := l.checkClock(ctx); err != nil {
		cancel()
		return nil, err
	}
	want := cfg.Meta
	want.CreatedMs = 0 // the database's now, for a new cluster
	mctx, mcancel := context.WithTimeout(ctx, cfg.Timeout)
	meta, err := ensureCluster(mctx, cfg.DB, cfg.Cluster, RegistryMySQL, want)
	mcancel()
	if err != nil {
		cancel()
		return nil, err
	}
	l.meta = meta
	s, err := l.claim(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	cfg.Holder.Acquired(s)
	go l.run()
	return l, nil
}

// checkClock compares the local clock with the database's NOW: the
// high-water marks are in the holders' clocks and the leases in the
// database's, and a takeover is prompt only when the two agree. The
// offset is the midpoint of the local readings around the query minus the
// database's reading; half the round trip is the measure's uncertainty
// and is not held against the node.
func (l *Lease) checkClock(ctx context.Context) error {
	off, rtt, err := l.measureOffset(ctx)
	if err != nil {
		return fmt.Errorf("read the database's clock: %w", err)
	}
	if excess := off.Abs() - rtt/2; excess > l.cfg.MaxClockSkew {
		dir := "ahead of"
		if off < 0 {
			dir = "behind"
		}
		return fmt.Errorf("%w: %w: the local clock is %v %s the database's NOW() (round trip %v); MaxClockSkew is %v: fix NTP on this host or the database server before starting",
			ErrClockSkew, worker.ErrClockSkew, off.Abs(), dir, rtt, l.cfg.MaxClockSkew)
	}
	l.log.Info("clock checked against the database", zap.Duration("offset", off), zap.Duration("round_trip", rtt))
	return nil
}

func (l *Lease) measureOffset(ctx context.Context) (off, rtt time.Duration, err error) {
	cctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
	defer cancel()
	t0 := l.cfg.Clock.Now()
	var db int64
	if err := l.cfg.DB.QueryRowContext(cctx, `SELECT `+dbNowMs).Scan(&db); err != nil {
		return 0, 0, err
	}
	t1 := l.cfg.Clock.Now()
	mid := t0.UnixMilli() + t1.Sub(t0).Milliseconds()/2
	off = time.Duration(mid-db) * time.Millisecond
	l.mu.Lock()
	l.offset = off
	l.mu.Unlock()
	return off, t1.Sub(t0), nil
}

// slotRow is a worker_slot row as the claim reads it.
type slotRow struct {
	node       int
	exists     bool
	holder     sql.NullString
	host       string
	port       int
	leaseUntil int64
	highWater  int64
	gen        int64
}

// candidate is a free slot and its rank (lower first).
type candidate struct {
	slotRow
	rank      int   // 0: ours (an earlier claim whose reply was lost), 1: this host:port's released slot, 2: others
	notBefore int64 // the slot's mark: previous holders' timestamps are <= it
}

// claim takes a free slot of the IDC in one transaction, retrying when
// concurrent claims deadlock or time out on the locks.
func (l *Lease) claim(ctx context.Context) (worker.Slot, error) {
	var err error
	for attempt := 1; attempt <= 8; attempt++ {
		var s worker.Slot
		s, err = l.claimOnce(ctx)
		if err == nil {
			return s, nil
		}
		if !retryable(err) || ctx.Err() != nil {
			break
		}
		l.log.Debug("slot claim retried", zap.Int("attempt", attempt), zap.Error(err))
		select {
		case <-ctx.Done():
		case <-time.After(time.Duration(attempt*10) * time.Millisecond):
		}
	}
	return worker.Slot{}, err
}

// claimOnce runs the claim transaction:
//
//   - lock the cluster row (FOR UPDATE): claims of one cluster take turns,
//     whatever the isolation level, and slot rows to INSERT cannot race;
//     its registry must still be mysql (see SetRegistry);
//   - read the IDC's slot rows with FOR UPDATE (the latest committed rows);
//   - choose a free slot (no holder, or a lease below the database's now):
//     this node's own unconfirmed claim first, then the slot this
//     host:port released cleanly if its mark has passed (stable worker
//     IDs across restarts), then the smallest mark: least recently used
//     (rule 3 of DESIGN.md) and, as marks are times, the least waiting,
//     so a slot whose mark has passed is preferred; never-used nodes have
//     mark 0 and are INSERTed;
//   - write holder, lease (database now + TTL) and a mark Lead ahead
//     (never below the old mark + 1), gen+1; commit;
//   - only then hand the slot over, with NotBefore = the old mark.
func (l *Lease) claimOnce(ctx context.Context) (worker.Slot, error) {
	cctx, cancel := context.WithTimeout(ctx, 2*l.cfg.Timeout)
	defer cancel()
	tx, err := l.cfg.DB.BeginTx(cctx, nil)
	if err != nil {
		return worker.Slot{}, err
	}
	defer tx.Rollback() //nolint:errcheck // no-op after Commit

	var dbNow int64
	var registry string
	if err := tx.QueryRowContext(cctx, `SELECT `+dbNowMs+`, registry FROM worker_cluster WHERE cluster = ? FOR UPDATE`, l.cfg.Cluster).
		Scan(&dbNow, &registry); err != nil {
		if errors.Is(err, sql.ErrNoRows) {
			return worker.Slot{}, fmt.Errorf("cluster %q has no row in worker_cluster", l.cfg.Cluster)
		}
		return worker.Slot{}, noSchema(err)
	}
	if registry != RegistryMySQL {
		// Checked under the cluster row's lock, which SetRegistry takes
		// too: no claim commits after the cluster left MySQL.
		return worker.Slot{}, registryMismatch(l.cfg.Cluster, registry, RegistryMySQL)
	}
	rows, err := tx.QueryContext(cctx,
		`SELECT node, holder, host, port, lease_until_ms, high_water_ms, gen FROM worker_slot WHERE cluster = ? AND idc = ? FOR UPDATE`,
		l.cfg.Cluster, l.cfg.IDC)
	if err != nil {
		return worker.Slot{}, noSchema(err)
	}
	size := 1 << l.meta.NodeBits
	byNode := make(map[int]slotRow, size)
	for rows.Next() {
		r := slotRow{exists: true}
		if err := rows.Scan(&r.node, &r.holder, &r.host, &r.port, &r.leaseUntil, &r.highWater, &r.gen); err != nil {
			rows.Close()
			return worker.Slot{}, err
		}
		byNode[r.node] = r
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return worker.Slot{}, err
	}

	now := clock.Millis(l.cfg.Clock)
	l.mu.Lock()
	pending := l.pending
	l.mu.Unlock()
	cands := make([]candidate, 0, size)
	for n := 0; n < size; n++ {
		r, ok := byNode[n]
		if !ok {
			cands = append(cands, candidate{slotRow: slotRow{node: n}, rank: 2})
			continue
		}
		c := candidate{slotRow: r, rank: 2, notBefore: r.highWater}
		switch {
		case r.holder.Valid && r.holder.String == l.id:
			// Written by this instance and by no one since: an earlier
			// claim whose commit reply was lost. Its NotBefore is the one
			// that claim read.
			c.rank = 0
			if pending != nil && pending.node == n {
				c.notBefore = pending.notBefore
			}
		case r.holder.Valid && r.leaseUntil >= dbNow:
			continue // a live holder's: never taken
		case !r.holder.Valid && r.host == l.cfg.Host && r.port == l.cfg.Port && r.highWater < now:
			c.rank = 1
		}
		cands = append(cands, c)
	}
	if len(cands) == 0 {
		return worker.Slot{}, fmt.Errorf("%w: %w: all %d worker slots of idc %d in cluster %q are held by live nodes (table worker_slot); stop a node of this IDC, start this one with another --idc, or create a new cluster with more node bits",
			ErrIDCFull, worker.ErrNoFreeSlot, size, l.cfg.IDC, l.cfg.Cluster)
	}
	sort.Slice(cands, func(i, j int) bool {
		a, b := cands[i], cands[j]
		if a.rank != b.rank {
			return a.rank < b.rank
		}
		if a.notBefore != b.notBefore {
			return a.notBefore < b.notBefore
		}
		return a.node < b.node
	})
	c := cands[0]
	s := worker.Slot{IDC: l.cfg.IDC, Node: c.node, Worker: l.meta.Worker(l.cfg.IDC, c.node), NotBefore: c.notBefore}
	if wait := time.Duration(c.notBefore-now) * time.Millisecond; wait > l.cfg.MaxStartWait {
		return worker.Slot{}, fmt.Errorf("%w: the best free slot, idc %d node %d (worker %d), may have been used up to %d (%s) but the local clock reads %d (%s): waiting %v is more than MaxStartWait %v; check this host's clock",
			worker.ErrStartWaitTooLong, s.IDC, s.Node, s.Worker, c.notBefore, rfc3339(c.notBefore), now, rfc3339(now), wait, l.cfg.MaxStartWait)
	}
	hw := max(now+l.lead.Milliseconds(), c.notBefore+1)
	offMs := now - dbNow
	ttl := l.ttl.Milliseconds()
	if c.exists {
		_, err = tx.ExecContext(cctx, `UPDATE worker_slot SET holder = ?, host = ?, port = ?, pid = ?, version = ?, started_at_ms = ?,
  lease_until_ms = `+dbNowMs+` + ?, high_water_ms = ?, released_at_ms = 0, heartbeat_ms = `+dbNowMs+`, clock_offset_ms = ?, gen = gen + 1
WHERE cluster = ? AND idc = ? AND node = ? AND gen = ?`,
			l.id, l.cfg.Host, l.cfg.Port, l.pid, l.cfg.Version, l.started, ttl, hw, offMs,
			l.cfg.Cluster, l.cfg.IDC, c.node, c.gen)
	} else {
		_, err = tx.ExecContext(cctx, `INSERT INTO worker_slot (cluster, idc, node, holder, host, port, pid, version, started_at_ms,
  lease_until_ms, high_water_ms, released_at_ms, heartbeat_ms, clock_offset_ms, gen)
VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, `+dbNowMs+` + ?, ?, 0, `+dbNowMs+`, ?, 1)`,
			l.cfg.Cluster, l.cfg.IDC, c.node, l.id, l.cfg.Host, l.cfg.Port, l.pid, l.cfg.Version, l.started, ttl, hw, offMs)
	}
	if err != nil {
		return worker.Slot{}, err
	}
	l.mu.Lock()
	l.pending = &pendingClaim{node: c.node, notBefore: c.notBefore}
	l.mu.Unlock()
	if err := tx.Commit(); err != nil {
		return worker.Slot{}, err
	}
	s.HighWater = hw
	l.mu.Lock()
	l.pending = nil
	l.state, l.slot, l.hasSlot, l.gen, l.hw, l.beatAt = worker.StateRegistered, s, true, c.gen+1, hw, time.Now()
	l.down, l.full = false, false
	l.mu.Unlock()
	fields := append(slotFields(s), zap.Int64("not_before_ms", s.NotBefore))
	if d := time.Duration(s.NotBefore-now) * time.Millisecond; d > 0 {
		fields = append(fields, zap.Duration("wait", d))
		l.log.Info("worker slot taken; SNOWFLAKE waits for the clock to pass the slot's previous mark, other channels serve meanwhile", fields...)
	} else {
		l.log.Info("worker slot taken", fields...)
	}
	return s, nil
}

func slotFields(s worker.Slot) []zap.Field {
	return []zap.Field{zap.Int("node", s.Node), zap.Int("worker", s.Worker), zap.Int64("high_water", s.HighWater)}
}

// run is the heartbeat: renew the mark and lease every HeartbeatInterval
// and on RequestExtend; take a slot again after losing one.
func (l *Lease) run() {
	defer close(l.done)
	t := time.NewTicker(l.cfg.HeartbeatInterval)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		case <-l.extend:
		}
		l.mu.Lock()
		has := l.hasSlot
		l.mu.Unlock()
		ok := false
		if has {
			ok = l.beat()
		} else {
			ok = l.reclaim()
		}
		if !ok {
			// The holder pokes RequestExtend while it is stalled at its
			// mark: do not hammer a database that is down.
			select {
			case <-l.stop:
				return
			case <-time.After(min(retryPause, l.cfg.HeartbeatInterval)):
			}
		}
	}
}

// retryPause is the least time between two attempts after a failed one.
const retryPause = 100 * time.Millisecond

// errLost is beat's verdict that the slot is someone else's now.
var errLost = errors.New("slot lost")

// beat writes the next mark, Lead ahead, conditional on holder and gen.
// Only after the UPDATE committed is the holder extended. 0 rows: the row
// is read; if it is still this instance's (a reply lost after the commit),
// its gen is adopted and the write retried; otherwise the slot is lost and
// the holder fenced at once. Any other error is an outage: the holder
// keeps serving up to the mark already written, the error is logged once
// per episode, and the next tick retries. It reports whether the mark was
// written.
func (l *Lease) beat() bool {
	l.mu.Lock()
	s := l.slot
	l.mu.Unlock()
	hw := l.nextMark(s.NotBefore)
	err := l.writeMark(l.ctx, s, `high_water_ms = ?, lease_until_ms = `+dbNowMs+` + ?, heartbeat_ms = `+dbNowMs+`, clock_offset_ms = ? - `+dbNowMs,
		hw, l.ttl.Milliseconds(), clock.Millis(l.cfg.Clock))
	switch {
	case err == nil:
		l.mu.Lock()
		l.hw, l.beatAt = max(l.hw, hw), time.Now()
		wasDown := l.down
		l.down = false
		l.mu.Unlock()
		if wasDown {
			l.log.Info("database reachable again: worker slot mark renewed", slotFields(worker.Slot{Node: s.Node, Worker: s.Worker, HighWater: hw})...)
		}
		l.cfg.Holder.Extended(hw)
		return true
	case errors.Is(err, errLost):
		l.fence(s, err)
	case l.ctx.Err() != nil:
		// Closing.
	default:
		l.mu.Lock()
		first := !l.down
		l.down = true
		mark := l.hw
		l.mu.Unlock()
		if first {
			l.log.Error("cannot renew the worker slot's mark: SNOWFLAKE keeps serving up to the mark already written, then stops until the database answers; retrying every heartbeat",
				zap.Int("node", s.Node), zap.Int("worker", s.Worker), zap.Int64("high_water", mark),
				zap.Time("serving_until", time.UnixMilli(mark).UTC()), zap.Error(err))
		}
	}
	return false
}

// fence stops the holder after the slot was lost and marks the lease
// fenced; the heartbeat tries to take a slot again at its next tick.
func (l *Lease) fence(s worker.Slot, reason error) {
	l.mu.Lock()
	l.state, l.hasSlot = worker.StateFenced, false
	l.mu.Unlock()
	err := fmt.Errorf("%w: idc %d node %d (worker %d): %w", worker.ErrSlotTaken, s.IDC, s.Node, s.Worker, reason)
	l.log.Error("worker slot lost: SNOWFLAKE stopped; taking a slot again", append(slotFields(s), zap.Error(err))...)
	l.cfg.Holder.Fenced(err)
}

// reclaim takes a slot again after a loss; failures are logged once per
// episode and retried at every tick. It reports whether a slot was taken.
func (l *Lease) reclaim() bool {
	s, err := l.claim(l.ctx)
	if err != nil {
		l.mu.Lock()
		first := !l.full
		l.full = true
		l.mu.Unlock()
		if first && l.ctx.Err() == nil {
			l.log.Error("cannot take a worker slot again; retrying every heartbeat", zap.Error(err))
		}
		return false
	}
	l.cfg.Holder.Acquired(s)
	return true
}

// nextMark is Lead ahead of the clock, never below a mark already written
// (a backward clock step must not lower it) nor the slot's NotBefore+1.
func (l *Lease) nextMark(notBefore int64) int64 {
	ahead := clock.Millis(l.cfg.Clock) + l.lead.Milliseconds()
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(ahead, l.hw, notBefore+1)
}

// writeMark runs UPDATE worker_slot SET <set>, gen = gen + 1 for the
// slot, conditional on holder = this instance and the gen it last wrote.
// set must write high_water_ms from its first argument. It returns errLost
// when the row is another holder's (or gone).
func (l *Lease) writeMark(ctx context.Context, s worker.Slot, set string, args ...any) error {
	for attempt := 0; ; attempt++ {
		l.mu.Lock()
		gen := l.gen
		l.mu.Unlock()
		cctx, cancel := context.WithTimeout(ctx, l.cfg.Timeout)
		res, err := l.cfg.DB.ExecContext(cctx, `UPDATE worker_slot SET `+set+`, gen = gen + 1
WHERE cluster = ? AND idc = ? AND node = ? AND holder = ? AND gen = ?`,
			append(args, l.cfg.Cluster, s.IDC, s.Node, l.id, gen)...)
		var n int64
		if err == nil {
			n, err = res.RowsAffected()
		}
		if err != nil {
			cancel()
			return err
		}
		if n == 1 {
			cancel()
			l.mu.Lock()
			l.gen = gen + 1
			l.mu.Unlock()
			return nil
		}
		var holder sql.NullString
		var rowGen, rowHW int64
		err = l.cfg.DB.QueryRowContext(cctx, `SELECT holder, gen, high_water_ms FROM worker_slot WHERE cluster = ? AND idc = ? AND node = ?`,
			l.cfg.Cluster, s.IDC, s.Node).Scan(&holder, &rowGen, &rowHW)
		cancel()
		switch {
		case errors.Is(err, sql.ErrNoRows):
			return fmt.Errorf("%w: the slot's row is gone from worker_slot", errLost)
		case err != nil:
			return err
		case !holder.Valid || holder.String != l.id || attempt > 0:
			who := "nobody (released)"
			if holder.Valid {
				who = "holder " + holder.String
			}
			return fmt.Errorf("%w: worker_slot now names %s at gen %d (this node wrote gen %d); its lease expired and another node took the slot, or the row was changed by hand",
				errLost, who, rowGen, gen)
		}
		// Still ours: a write of ours committed but its reply was lost.
		// Its mark is durable and ours; adopt the row and write again.
		l.mu.Lock()
		l.gen, l.hw = rowGen, max(l.hw, rowHW)
		l.mu.Unlock()
		l.log.Info("adopted this node's own earlier write (its reply was lost)", zap.Int64("gen", rowGen), zap.Int64("high_water", rowHW))
	}
}

// RequestExtend asks for the next mark to be written now rather than at
// the next heartbeat. It never blocks; requests coalesce.
func (l *Lease) RequestExtend() {
	select {
	case l.extend <- struct{}{}:
	default:
	}
}

// Meta returns the cluster's settings as stored in worker_cluster.
func (l *Lease) Meta() worker.Meta { return l.meta }

// State returns registered while a slot is held, fenced after losing one
// (until a slot is taken again), none after Close.
func (l *Lease) State() worker.State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state
}

// Slot returns the slot held; ok is false while none is.
func (l *Lease) Slot() (worker.Slot, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.hasSlot {
		return worker.Slot{}, false
	}
	return l.slot, true
}

// Status returns a snapshot for metrics (ZKConnected is always false;
// ClockOffset is the local clock minus the database's at the last claim).
func (l *Lease) Status() worker.Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	return worker.Status{State: l.state, Slot: l.slot, HasSlot: l.hasSlot, HighWater: l.hw, LastHeartbeat: l.beatAt,
		ClockOffset: l.offset, ClockOffsetKnown: true}
}

// DatabaseUnreachable reports whether the last heartbeat failed for a
// reason other than losing the slot (the holder serves up to its mark).
func (l *Lease) DatabaseUnreachable() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.down
}

// Close stops the heartbeat, fences the holder (the server's holder stops
// the generator, so LastUsed is final), then writes the holder's exact
// last used millisecond (at least NotBefore) as the slot's mark and
// releases the slot: holder NULL, lease_until_ms 0, released_at_ms = the
// database's now. The write is conditional like every other, so a slot
// lost meanwhile keeps its new holder's mark. The exact mark lets a clean
// restart (which prefers the slot its host:port released) serve at once.
// If the database cannot be reached, the look-ahead mark stays: safe, the
// slot is free again when its lease expires. Close is idempotent.
func (l *Lease) Close(ctx context.Context) error {
	l.once.Do(func() { l.err = l.close(ctx) })
	return l.err
}

func (l *Lease) close(ctx context.Context) error {
	close(l.stop)
	l.cancel() // ends a heartbeat stuck in a database call
	<-l.done
	l.mu.Lock()
	s, has := l.slot, l.hasSlot
	l.state, l.hasSlot = worker.StateNone, false
	l.mu.Unlock()
	l.cfg.Holder.Fenced(fmt.Errorf("%w: shutting down", worker.ErrClosed))
	if !has {
		return nil
	}
	exact := max(l.cfg.Holder.LastUsed(), s.NotBefore)
	err := l.writeMark(ctx, s, `high_water_ms = ?, holder = NULL, lease_until_ms = 0, released_at_ms = `+dbNowMs+`, heartbeat_ms = `+dbNowMs, exact)
	switch {
	case errors.Is(err, errLost):
		l.log.Warn("worker slot was already taken by another node at close; its mark left as is", append(slotFields(s), zap.Error(err))...)
		return nil
	case err != nil:
		l.log.Error("closing the worker lease: cannot write the exact mark; the look-ahead mark stays and the slot is free when its lease expires",
			append(slotFields(s), zap.Error(err))...)
		return fmt.Errorf("release worker slot idc %d node %d: %w", s.IDC, s.Node, err)
	}
	l.log.Info("worker lease closed", zap.Int("node", s.Node), zap.Int("worker", s.Worker), zap.Int64("high_water", exact), zap.Int64("last_used_ms", exact))
	return nil
}

// crash stops the heartbeat without releasing anything, as a killed
// process would (tests).
func (l *Lease) crash() {
	l.once.Do(func() {
		close(l.stop)
		l.cancel()
		<-l.done
	})
}
