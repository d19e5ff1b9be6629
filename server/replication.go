package server

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/idgen/idgen/cluster/zksession"
	"github.com/idgen/idgen/ordered"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/mysqlstore"
	"github.com/idgen/idgen/segment/zkguard"
)

// replicationEvery is how often the replication verdict is read again:
// semi-synchronous replication falls back to asynchronous by itself when
// its replica is slow, and a failover changes the server.
const replicationEvery = 15 * time.Second

// safeFresh is how old a safe verdict may be when the guard relies on it
// to serve a segment without the ledger (ZooKeeper unreachable): older,
// safe() reads it again first. A replica that connects between two reads
// turns a safe verdict lossy (issue 29 hole f).
const safeFresh = 2 * time.Second

// replicationSource is what the watch reads: *mysqlstore.Store.
type replicationSource interface {
	DB() *sql.DB
	OnServerChange(fn func(old, new string))
}

// replicationWatch keeps the replication verdict of the MySQL server
// current, logs it at start and when it changes, and exports it.
type replicationWatch struct {
	ms   replicationSource
	m    *metrics
	log  *zap.Logger
	hist mysqlstore.ReplicaHistory // replicas seen, so a reconnecting one still counts
	cur  atomic.Pointer[mysqlstore.Replication]
	// at is when cur was read (unix ns); 0 after a MySQL server change
	// invalidated it.
	at     atomic.Int64
	readMu sync.Mutex // one read at a time
	// guard keeps the replicas seen in ZooKeeper for the other nodes and
	// this node's next process (nil without ZooKeeper).
	guard atomic.Pointer[zkguard.Guard]
	kick  chan struct{}
	stop  chan struct{}
	done  chan struct{}
}

func startReplicationWatch(ctx context.Context, ms replicationSource, m *metrics, log *zap.Logger) *replicationWatch {
	w := &replicationWatch{ms: ms, m: m, log: log, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	w.read(ctx, true)
	// A new server has its own replication: the verdict read on the old
	// one says nothing about it.
	ms.OnServerChange(func(string, string) {
		w.at.Store(0)
		select {
		case w.kick <- struct{}{}:
		default:
		}
	})
	go w.loop()
	return w
}

func (w *replicationWatch) read(ctx context.Context, first bool) {
	w.readMu.Lock()
	defer w.readMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	r, err := w.hist.Read(ctx, w.ms.DB())
	if err != nil {
		if first {
			w.log.Warn("could not read the MySQL replication setup", zap.Error(err))
		}
		if w.cur.Load() != nil {
			return // keep the last verdict (for the logs and metrics; safe() needs a fresh one)
		}
		r = mysqlstore.Replication{Verdict: mysqlstore.VerdictUnknown, Detail: err.Error()}
	}
	if g := w.guard.Load(); g != nil {
		g.NoteReplicas(w.hist.Seen())
	}
	old := w.cur.Swap(&r)
	w.at.Store(time.Now().UnixNano())
	w.m.setReplication(r)
	if old != nil && old.Verdict == r.Verdict {
		return
	}
	fields := []zap.Field{zap.String("verdict", string(r.Verdict)), zap.String("replication", r.String())}
	switch {
	case r.Safe():
		w.log.Info("MySQL replication: a failover loses no reservation", fields...)
	default:
		w.log.Warn("MySQL replication: a failover can lose reservations; the ZooKeeper guard repairs what the nodes remember", fields...)
	}
}

func (w *replicationWatch) loop() {
	defer close(w.done)
	t := time.NewTicker(replicationEvery)
	defer t.Stop()
	for {
		select {
		case <-w.stop:
			return
		case <-t.C:
			w.read(context.Background(), false)
		case <-w.kick:
			w.read(context.Background(), false)
		}
	}
}

// replicasSeen takes the replicas another node (or this node's previous
// process) saw: the verdict is read again when that is more than this
// node saw.
func (w *replicationWatch) replicasSeen(n int) {
	if w.hist.Note(n) {
		w.at.Store(0)
		select {
		case w.kick <- struct{}{}:
		default:
		}
	}
}

// safe reports whether a verdict at most safeFresh old says a failover
// loses nothing; an older one (or one from before a server change) is
// read again first, bounded by 2s. The guard asks only when the ledger
// cannot be reached, so the read is rare.
func (w *replicationWatch) safe() bool {
	if time.Since(time.Unix(0, w.at.Load())) > safeFresh {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		w.read(ctx, false)
		cancel()
		if time.Since(time.Unix(0, w.at.Load())) > safeFresh {
			return false // could not read it: not proven safe
		}
	}
	r := w.cur.Load()
	return r != nil && r.Safe()
}

func (w *replicationWatch) close() {
	close(w.stop)
	<-w.done
}

// startGuard starts the cross-node guard (package zkguard) of a cluster
// with ZooKeeper and MySQL. Without ZooKeeper there is nothing shared but
// MySQL itself, so nothing to start: the README says what that means on
// asynchronous replication.
func startGuard(cfg Config, ms *mysqlstore.Store, repl *replicationWatch, rpcPort int, zs *zksession.Session, log *zap.Logger) (*zkguard.Guard, error) {
	disabled := faultNoReplicationGuard()
	if disabled {
		log.Error("IDGEN_FAULT_NO_REPLICATION_GUARD=1: the cross-node replication guard is OFF (fault injection's negative control); a lossy MySQL failover will repeat numbers")
	}
	g, err := zkguard.Open(zkguard.Config{Session: zs, Servers: strings.Split(cfg.ZK, ","), Root: cfg.ZKRoot, Cluster: cfg.Cluster,
		Auth: cfg.ZKAuth, SessionTimeout: cfg.ZKSessionTimeout, Timeout: cfg.StoreTimeout,
		Self: fmt.Sprintf("%s:%d", advertiseHost(cfg), rpcPort), BarrierWait: cfg.OrderedBarrierWait, MaxClockSkew: cfg.MaxPeerSkew,
		ServeUnverified: repl.safe, OnReplicasSeen: repl.replicasSeen, Disabled: disabled, Logger: log.Named("guard")})
	if err != nil {
		return nil, err
	}
	repl.guard.Store(g)
	g.NoteReplicas(repl.hist.Seen())
	ms.OnServerChange(g.ServerChanged)
	return g, nil
}

// flushRemembered raises every ORDERED row this node remembers on the
// store and stores again the request ids it stored (requests, nil on the
// per-request path): the barrier's repair after a server change.
func flushRemembered(remembered func(fn func(biz, sub string, last int64)), requests func(fn func(ordered.Request)),
	ms *mysqlstore.Store) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if err := ms.RaiseOrdered(ctx, segment.Marks(remembered)); err != nil || requests == nil {
			return err
		}
		var reqs []ordered.Request
		requests(func(q ordered.Request) { reqs = append(reqs, q) })
		return ms.RestoreRequests(ctx, reqs)
	}
}

// guardCollector exports the guard's and the MySQL store's counters (the
// regressions in every mode).
type guardCollector struct {
	g  *zkguard.Guard    // nil without ZooKeeper and MySQL
	ms *mysqlstore.Store // nil without MySQL
	u  *segment.Unordered
	// orderedRegressions counts ORDERED ranges refused or raised because
	// the store was behind (the per-request processor or the owners).
	orderedRegressions func() uint64
}

var (
	descStoreRegr = prometheus.NewDesc("idgen_store_regressions_total",
		"Reservations the store returned at or below numbers already handed out (a lossy failover), dropped and repaired by raising the store; nothing was served twice.",
		[]string{"channel"}, nil)
	descBarriers = prometheus.NewDesc("idgen_ordered_failover_barriers_total",
		"ORDERED barriers after a MySQL server change, by outcome: complete (every member raised what it remembers, or its serving bound passed) or timeout (a member that may still serve had not raised its rows after --ordered-barrier-wait; the gate stays closed until it does or its bound passes).",
		[]string{"outcome"}, nil)
	descBarrierExpired = prometheus.NewDesc("idgen_ordered_barrier_members_expired_total",
		"Barrier members counted gone because their serving bound passed without raising their rows (paused, or cut off from ZooKeeper): ORDERED keys only they remembered are protected only by lossless replication.", nil, nil)
	descGuardRestores = prometheus.NewDesc("idgen_replication_guard_restores_total",
		"Times the replication guard applied the restore rule (ZooKeeper wiped or restored from an older copy): ORDERED rows raised and ledger segments recorded again.", nil, nil)
	descGate = prometheus.NewDesc("idgen_ordered_gate_open",
		"1 while ORDERED may reserve; 0 while the barrier after a MySQL server change holds it.", nil, nil)
	descLedger = prometheus.NewDesc("idgen_segment_ledger_claims_total",
		"UNORDERED segments recorded in the cluster's ledger, by result: ok, conflict (refused: already served), error (ZooKeeper unreachable), unverified (served without the ledger: lossless replication), late (an unverified one recorded once ZooKeeper answered), late_overlap (recorded late over a segment the ledger held: numbers may have been served twice; alert on it).",
		[]string{"result"}, nil)
	descLedgerPending = prometheus.NewDesc("idgen_segment_ledger_unverified_pending",
		"Segments served unverified (ZooKeeper unreachable, lossless replication) not yet recorded in the ledger; recorded as soon as ZooKeeper answers.", nil, nil)
	descServerChanges = prometheus.NewDesc("idgen_mysql_server_changes_total",
		"New MySQL connections that reached another server than the one before (a failover or switchover).", nil, nil)
	descParted = prometheus.NewDesc("idgen_ordered_parted_marks_total",
		"ORDERED marks carried over a clean stop, by op: written (this node wrote its marks to ZooKeeper when it stopped; counted by the stopping process) and raised (marks of stopped nodes this node raised on a new MySQL server before its gate opened).",
		[]string{"op"}, nil)
	descConflicts = prometheus.NewDesc("idgen_mysql_conflict_retries_total",
		"Reservations rolled back by a deadlock or a Galera certification conflict and tried again.", nil, nil)
)

func (c guardCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descStoreRegr, descBarriers, descBarrierExpired, descGuardRestores, descGate, descLedger, descLedgerPending, descServerChanges, descConflicts, descParted} {
		ch <- d
	}
}

func (c guardCollector) Collect(ch chan<- prometheus.Metric) {
	var unord uint64
	for _, s := range c.u.Stats() {
		unord += s.Regressions
	}
	ch <- prometheus.MustNewConstMetric(descStoreRegr, prometheus.CounterValue, float64(unord), "unordered")
	ch <- prometheus.MustNewConstMetric(descStoreRegr, prometheus.CounterValue, float64(c.orderedRegressions()), "ordered")
	if c.ms != nil {
		ch <- prometheus.MustNewConstMetric(descServerChanges, prometheus.CounterValue, float64(c.ms.ServerChanges()))
		ch <- prometheus.MustNewConstMetric(descConflicts, prometheus.CounterValue, float64(c.ms.ConflictRetries()))
	}
	if c.g == nil {
		return
	}
	s := c.g.Stats()
	ch <- prometheus.MustNewConstMetric(descBarriers, prometheus.CounterValue, float64(s.BarriersComplete), "complete")
	ch <- prometheus.MustNewConstMetric(descBarriers, prometheus.CounterValue, float64(s.BarrierTimeouts), "timeout")
	ch <- prometheus.MustNewConstMetric(descBarrierExpired, prometheus.CounterValue, float64(s.MembersExpired))
	ch <- prometheus.MustNewConstMetric(descGuardRestores, prometheus.CounterValue, float64(s.Restores))
	ch <- prometheus.MustNewConstMetric(descGate, prometheus.GaugeValue, b2f(s.GateOpen))
	ch <- prometheus.MustNewConstMetric(descParted, prometheus.CounterValue, float64(s.PartedWritten), "written")
	ch <- prometheus.MustNewConstMetric(descParted, prometheus.CounterValue, float64(s.PartedRaised), "raised")
	for _, x := range []struct {
		r string
		n uint64
	}{{"ok", s.Claims}, {"conflict", s.Conflicts}, {"error", s.Errors}, {"unverified", s.Unverified},
		{"late", s.LateRecorded}, {"late_overlap", s.LateOverlaps}} {
		ch <- prometheus.MustNewConstMetric(descLedger, prometheus.CounterValue, float64(x.n), x.r)
	}
	ch <- prometheus.MustNewConstMetric(descLedgerPending, prometheus.GaugeValue, float64(s.UnverifiedPending))
}
