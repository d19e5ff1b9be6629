// Package zkguard keeps a cluster's numbers unique across a lossy MySQL
// failover, using the one thing the nodes share besides MySQL: ZooKeeper.
//
// A failover to an asynchronous replica that had not received the last
// reservations brings `segment.max_id` and ORDERED rows back in time. Each
// node's own regression guard sees only its own history, so another node
// would serve the lost numbers again. Two mechanisms close that:
//
//   - The ledger (UNORDERED and snowflake fallback segments): every segment
//     is recorded under /<root>/<cluster>/segments/<biz> (compare-and-set on
//     the znode version) before any of its numbers is served. A segment
//     that overlaps a recorded one was served by some node already: it is
//     dropped, the store is raised above the ledger and the reservation is
//     tried again (segment.Unordered does the loop). Reservations are rare
//     (a segment lasts about 15 minutes), so the ledger costs one ZooKeeper
//     round trip every few minutes per business and node.
//
//   - The barrier (ORDERED): every new MySQL connection reports the identity
//     of its server (mysqlstore.Store.OnServerChange). When it changes, the
//     node closes its ORDERED gate at once, before the new connection serves
//     a statement, records the new server and a new generation under
//     /<root>/<cluster>/mysql/server, raises every ORDERED row it remembers
//     (perrequest.Processor.Remembered) on the new server, and acknowledges the
//     generation in its member record /<root>/<cluster>/mysql/members/<node>~<instance>
//     (one per process: a restarted process does not hide its predecessor).
//     Every node that sees the new generation does the same. A gate opens
//     again when every member acknowledged the generation or provably cannot
//     serve any more. So no node reserves on the new server below a number
//     any member may still hand out from memory.
//
// Membership means memory (issue 29 hole c): a node paused past its
// ZooKeeper session, or cut off from ZooKeeper but not from MySQL, still
// remembers keys and can serve them. So the member record is persistent,
// not ephemeral, and carries a "serving until" bound the node renews while
// it is at the current generation and refuses ORDERED past (Enter, Check,
// Serving). The others count a member gone once its bound passed by
// Config.MaxClockSkew on their clocks. A node that cannot raise its rows
// does not renew, so the wait for it is bounded. A clean stop deletes the
// record. Config.BarrierWait only decides when a round counts as a
// timeout: the gate stays closed while a member may still serve.
//
// The restore rule (hole d): a generation or a server record that went
// back, or a restore reported by the ZooKeeper session (the incarnation
// check), makes the node raise its rows and acknowledge again, and record
// its own ledger ranges again.
//
// Keys no member remembers (the node that served them died with the
// primary, or its memory evicted them) are protected only by lossless
// replication: run semi-synchronous AFTER_SYNC or Galera when ORDERED
// matters.
//
// The guard runs on the node's cluster/zksession Session (one reconnect
// and redial policy for every guard: a wiped ensemble refuses the old
// client's handshakes forever, hole e).
package zkguard

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/cluster/zksession"
	"github.com/idgen/idgen/segment"
)

// Defaults of Config.
const (
	DefaultSessionTimeout = 10 * time.Second
	DefaultTimeout        = 2 * time.Second
	DefaultBarrierWait    = 10 * time.Second
	DefaultMemberLease    = 10 * time.Second
	DefaultMaxClockSkew   = time.Second
	// memberGC is how long past its bound a member record is kept before
	// any node deletes it (a node that crashed leaves one behind).
	memberGC = time.Hour
	// maxRanges bounds the ranges kept per business: beyond it the two
	// lowest are merged with the hole between them (numbers never served:
	// treating them as served only refuses a segment that was safe).
	maxRanges = 32
	// The barrier loop's period while the gate is closed and open.
	pollClosed = 200 * time.Millisecond
	pollOpen   = time.Second
)

// Config configures Open.
type Config struct {
	// Session is the node's shared ZooKeeper session (package
	// cluster/zksession: one reconnect and redial policy, the incarnation
	// check, View.Restores). Nil: Open starts its own from Servers, Auth
	// and SessionTimeout, and Close closes it.
	Session        *zksession.Session
	Servers        []string
	Root, Cluster  string
	Auth           string // optional digest "user:password" (the znodes get its ACL)
	SessionTimeout time.Duration
	// Timeout bounds one ledger claim (default 2s).
	Timeout time.Duration
	// Self names this node in the barrier (host:port of its RPC address).
	Self string
	// Instance tells this process's member record from those of earlier
	// processes of the same Self (default: random). A process restarted
	// under the same name must not overwrite its predecessor's record:
	// the predecessor may have answered numbers that a lossy failover
	// then lost, and its record is what makes the barrier wait for it
	// and count it gone (the simulator's seed 1120).
	Instance string
	// BarrierWait is how long the ORDERED gate waits for the other
	// members after a server change before the round counts as a timeout
	// (default 10s). The gate stays closed after it while an
	// unacknowledged member may still serve (its bound has not passed),
	// at most MemberLease plus twice MaxClockSkew longer.
	BarrierWait time.Duration
	// MemberLease is how far ahead of each renewal a member's "serving
	// until" bound reaches (default 10s): a node that could not renew it
	// refuses ORDERED once it passed, and the others count it gone once
	// it passed by MaxClockSkew on their clocks.
	MemberLease time.Duration
	// MaxClockSkew is the largest difference between two nodes' wall
	// clocks the bounds allow for (default 1s; the server passes
	// --max-peer-clock-skew, which it enforces at start).
	MaxClockSkew time.Duration
	// Now is the wall clock of the bounds (nil: time.Now).
	Now func() time.Time
	// OnMembersGone, when set, is told the members a barrier counted gone
	// (their bound passed without an acknowledgement) just before the gate
	// opens: what only they remembered is protected only by the
	// replication. The simulator uses it to tell that documented limit
	// from a bug; the metric idgen_ordered_barrier_members_expired_total
	// counts them.
	OnMembersGone func(members []Member)
	// ServeUnverified says whether a segment may be served when the
	// ledger cannot be reached (ZooKeeper down): true when the store's
	// replication cannot lose reservations (then the ledger is only a
	// second line). Nil: never.
	ServeUnverified func() bool
	// OnReplicasSeen receives the most MySQL replicas any node of the
	// cluster recorded as seen (NoteReplicas), once it was read from
	// ZooKeeper and whenever it grows: a node that starts while the only
	// replica is reconnecting still judges replication lossy (issue 29
	// hole f). Nil: not read.
	OnReplicasSeen func(n int)
	// Disabled switches both mechanisms off (fault injection's negative
	// control only): Claim admits every range, the gate stays open with
	// one token (Enter, Check and Serving never refuse, ServerChanged is
	// ignored), nothing is read or written in ZooKeeper. The server still
	// passes the guard as ledger and gate, so the control reopens the
	// hole for UNORDERED and ORDERED alike.
	Disabled bool
	Logger   *zap.Logger
}

// zkConn is the ZooKeeper client calls the guard makes (*zk.Conn, and the
// shared session's handle, implement it; tests wrap it to cut the guard
// off).
type zkConn interface {
	Create(path string, data []byte, flags int32, acl []zk.ACL) (string, error)
	Get(path string) ([]byte, *zk.Stat, error)
	Set(path string, data []byte, version int32) (*zk.Stat, error)
	Children(path string) ([]string, *zk.Stat, error)
	Exists(path string) (bool, *zk.Stat, error)
	Delete(path string, version int32) error
	SessionID() int64
	State() zk.State
}

// Guard is a cluster's ledger and barrier. It is a segment.Ledger and a
// segment.Gate.
type Guard struct {
	cfg    Config
	log    *zap.Logger
	conn   zkConn
	sess   *zksession.Session // nil: the guard's own plain client (fault injection only)
	closer func()             // closes the guard's own session or client
	acl    []zk.ACL
	base   string // /<root>/<cluster>

	claims, conflicts, errs, unverified   atomic.Uint64
	complete, timeouts, expired, restores atomic.Uint64
	partedRaised, partedWritten           atomic.Uint64
	repair                                Repair // set by StartBarrier
	// Segments served unverified, recorded in the ledger once ZooKeeper
	// answered again; overlapping ones overlapped a recorded segment
	// (served twice, or by the same node before a crash).
	lateRecorded, lateOverlaps atomic.Uint64

	pendMu  sync.Mutex
	pending []pendingSegment // served unverified, not in the ledger yet

	mu       sync.Mutex
	open     bool
	token    uint64    // bumped whenever the gate closes
	closedAt time.Time // when the gate closed
	why      string    // why it closed
	acked    int64     // generation acknowledged
	// selfUntil is this node's own bound: the monotonic time its member
	// record's "serving until" was computed from, plus MemberLease (zero:
	// none written yet). Enter refuses past it (and past selfUntilMs on
	// the wall clock): the other nodes count this node gone then.
	selfUntil   time.Time
	selfUntilMs int64
	renewedAt   time.Time // last successful write of the member record
	// memberWrites numbers this process's writes of its member record
	// (writeMember, leave); a write whose number is not the newest any
	// more when it reads the record makes no change (see writeMember).
	memberWrites uint64
	// serverChanges counts the MySQL server changes the gate closed for
	// (a new connection's server, a new server record), not its other
	// closes (a ZooKeeper restore, the start): ServerChanges.
	serverChanges uint64
	// unverifiedUntil (monotonic): the bound may pass without refusing
	// ORDERED until then, because the store's replication was last found
	// unable to lose a reservation (bound.go); unverifiedOn logs the
	// episode once.
	unverifiedUntil time.Time
	unverifiedOn    bool
	timedOut        bool // this closed round was counted as a timeout
	// lastMzxid is the modification zxid of the server record last read,
	// seenRestores the session's View.Restores applied: either going back
	// means ZooKeeper was restored from an older copy (the restore rule).
	lastMzxid    int64
	seenRestores uint64
	// restoredAt is when this guard last applied the restore rule
	// (restoreHold).
	restoredAt time.Time
	// replicas: the most MySQL replicas seen, by this node (local) and as
	// recorded in ZooKeeper (stored; -1 until read).
	replicasLocal, replicasStored int
	replicasReadAt                time.Time
	// mine are the segments this node recorded in the ledger, per
	// business (bounded like the ledger): recorded again after a restore.
	mine    map[string]*ledger
	kick    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	started bool
}

var (
	_ segment.Ledger = (*Guard)(nil)
	_ segment.Gate   = (*Guard)(nil)
)

// Open connects to ZooKeeper (without waiting for a session).
func Open(cfg Config) (*Guard, error) {
	if len(cfg.Servers) == 0 && cfg.Session == nil && !cfg.Disabled {
		// Servers are dialed only without a shared Session (and by the
		// own-client fault switch, which then refuses below).
		return nil, errors.New("zkguard: Config.Servers is empty (and no Config.Session is given)")
	}
	if cfg.Root == "" || cfg.Cluster == "" || cfg.Self == "" {
		return nil, errors.New("zkguard: Config.Root, Cluster and Self are required")
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.BarrierWait <= 0 {
		cfg.BarrierWait = DefaultBarrierWait
	}
	if cfg.MemberLease <= 0 {
		cfg.MemberLease = DefaultMemberLease
	}
	if cfg.MaxClockSkew <= 0 {
		cfg.MaxClockSkew = DefaultMaxClockSkew
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Instance == "" {
		var b [6]byte
		_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
		cfg.Instance = hex.EncodeToString(b[:])
	}
	if strings.ContainsAny(cfg.Self+cfg.Instance, "/~") {
		return nil, fmt.Errorf("zkguard: Config.Self %q and Instance %q must not contain '/' or '~' (they name a znode)", cfg.Self, cfg.Instance)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	acl, err := cluster.ACL(cfg.Auth)
	if err != nil {
		return nil, fmt.Errorf("zkguard: Auth: %w", err)
	}
	g := &Guard{cfg: cfg, log: cfg.Logger, base: path.Join(cfg.Root, cfg.Cluster), acl: acl, mine: map[string]*ledger{}, replicasStored: -1,
		kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{}), closedAt: time.Now(),
		why: "starting: reading the cluster's MySQL server record in ZooKeeper"}
	if cfg.Disabled {
		g.open = true
		close(g.done)
		return g, nil
	}
	switch {
	case faultGuardOwnClient():
		// Hole e reopened: a plain client that never recovers from a wipe.
		g.log.Error("IDGEN_FAULT_GUARD_OWN_CLIENT=1: the replication guard dials its own plain ZooKeeper client, which never recovers from a wipe (fault injection's negative control)")
		c, _, err := zk.Connect(cfg.Servers, cfg.SessionTimeout, zk.WithLogger(cluster.ZKLogger(g.log)), zk.WithLogInfo(false))
		if err != nil {
			return nil, fmt.Errorf("zkguard: %w", err)
		}
		if cfg.Auth != "" {
			if err := c.AddAuth("digest", []byte(cfg.Auth)); err != nil {
				c.Close()
				return nil, fmt.Errorf("zkguard: add auth: %w", err)
			}
		}
		g.conn, g.closer = c, c.Close
	case cfg.Session != nil:
		g.sess = cfg.Session
		g.conn = g.sess.Conn()
	default:
		s, err := zksession.Start(zksession.Config{Servers: cfg.Servers, SessionTimeout: cfg.SessionTimeout, Auth: cfg.Auth,
			Logger: g.log.Named("zk")})
		if err != nil {
			return nil, fmt.Errorf("zkguard: %w", err)
		}
		g.sess, g.conn, g.closer = s, s.Conn(), s.Close
	}
	if g.sess != nil {
		g.seenRestores = g.sess.View().Restores
	}
	return g, nil
}

// Close stops the barrier and closes the ZooKeeper connection (the node's
// acknowledgement znode goes with the session).
func (g *Guard) Close() {
	g.mu.Lock()
	started := g.started
	g.mu.Unlock()
	select {
	case <-g.stop:
	default:
		close(g.stop)
	}
	if started {
		<-g.done
	}
	if started && !g.cfg.Disabled {
		g.leave()
	}
	if g.closer != nil {
		g.closer()
	}
}

// call runs a ZooKeeper operation bounded by Config.Timeout (cluster.Call:
// it fails fast without a session rather than queue behind a reconnect;
// an operation that cannot finish in time is abandoned). Errors from
// cluster.Call are reported unavailable.
func (g *Guard) call(ctx context.Context, f func() error) error {
	err := cluster.Call(ctx, usable{g}, g.cfg.Timeout, f)
	if errors.Is(err, cluster.ErrNoSession) || errors.Is(err, cluster.ErrNoAnswer) || zksession.IsConnErr(err) {
		return fmt.Errorf("%w: zkguard: %w", segment.ErrUnavailable, err)
	}
	return err
}

// usable is the guard's session state for cluster.Call: a session counts
// only once the shared session reports it usable (its incarnation check
// passed since it reconnected).
type usable struct{ g *Guard }

func (u usable) State() zk.State {
	if u.g.sess != nil && !u.g.sess.View().Has {
		return zk.StateDisconnected
	}
	return u.g.conn.State()
}

// ensure creates p and its missing parents (persistent, empty).
func (g *Guard) ensure(p string) error {
	if ok, _, err := g.conn.Exists(p); err != nil || ok {
		return err
	}
	if parent := path.Dir(p); parent != "/" {
		if err := g.ensure(parent); err != nil {
			return err
		}
	}
	if _, err := g.conn.Create(p, nil, 0, g.acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return err
	}
	return nil
}

// Stats are the guard's counters, for metrics.
type Stats struct {
	Claims, Conflicts, Errors, Unverified uint64 // ledger
	// Segments served unverified: waiting to be recorded, recorded late,
	// and recorded late over a segment the ledger already held.
	UnverifiedPending, LateRecorded, LateOverlaps uint64
	// BarriersComplete counts rounds that opened with every member
	// acknowledging or provably gone (its bound passed); MembersExpired
	// the members counted gone that way (what only they remembered is
	// unprotected, as after a crash); Restores the restore rule applied.
	BarriersComplete, BarrierTimeouts, MembersExpired, Restores uint64
	// PartedWritten counts the marks this node wrote when it left;
	// PartedRaised the marks of nodes that left this node raised before
	// its gate opened.
	PartedWritten, PartedRaised uint64
	GateOpen                    bool
}

// Stats returns the counters.
func (g *Guard) Stats() Stats {
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	g.pendMu.Lock()
	pend := len(g.pending)
	g.pendMu.Unlock()
	return Stats{Claims: g.claims.Load(), Conflicts: g.conflicts.Load(), Errors: g.errs.Load(), Unverified: g.unverified.Load(),
		UnverifiedPending: uint64(pend), LateRecorded: g.lateRecorded.Load(), LateOverlaps: g.lateOverlaps.Load(),
		BarriersComplete: g.complete.Load(), BarrierTimeouts: g.timeouts.Load(), MembersExpired: g.expired.Load(), Restores: g.restores.Load(),
		PartedWritten: g.partedWritten.Load(), PartedRaised: g.partedRaised.Load(), GateOpen: open}
}

// ---- the ledger ----

// ledger is the JSON of /<root>/<cluster>/segments/<biz>: the ranges
// handed out, sorted, disjoint, adjacent ones merged.
type ledger struct {
	Ranges [][2]int64 `json:"ranges"`
}

// Claim implements segment.Ledger.
func (g *Guard) Claim(ctx context.Context, biz string, r segment.Range) (int64, error) {
	if g.cfg.Disabled {
		return 0, nil
	}
	var high int64
	var conflict bool
	err := g.modifyLedger(ctx, biz, func(l *ledger) bool {
		if h, overlaps := l.overlaps(r); overlaps {
			high, conflict = h, true
			return false
		}
		l.add(r)
		return true
	})
	switch {
	case err == nil && conflict:
		g.conflicts.Add(1)
		return high, fmt.Errorf("zkguard: biz %q: segment %d..%d overlaps segments already handed out (up to %d): %w",
			biz, r.First, r.Last, high, segment.ErrRegressed)
	case err == nil:
		g.claims.Add(1)
		g.remember(biz, r)
		return 0, nil
	}
	g.errs.Add(1)
	if g.cfg.ServeUnverified != nil && g.cfg.ServeUnverified() {
		g.unverified.Add(1)
		// Recorded once ZooKeeper answers again (recordPending): a later
		// failover that turns lossy must not hand this segment out again.
		if !faultUnverifiedNotRecorded() {
			g.pendMu.Lock()
			g.pending = append(g.pending, pendingSegment{biz: biz, r: r, last: &ledgerAttempt{}})
			g.pendMu.Unlock()
			g.remember(biz, r)
		}
		g.log.Warn("segment ledger unreachable; serving the segment unverified (the MySQL replication cannot lose it); it is recorded in the ledger once ZooKeeper answers",
			zap.String("biz", biz), zap.Int64("first", r.First), zap.Int64("last", r.Last), zap.Error(err))
		return 0, nil
	}
	return 0, fmt.Errorf("zkguard: biz %q: record segment %d..%d in the ledger: %w: %w", biz, r.First, r.Last, segment.ErrUnavailable, err)
}

// NoteReplicas records that this node saw n MySQL replicas reading the
// cluster's binary log; the barrier loop keeps the most any node saw in
// /<root>/<cluster>/mysql/replicas. An operator who removed every replica
// for good deletes that znode (and restarts the nodes) to let the verdict
// say no-replica again.
func (g *Guard) NoteReplicas(n int) {
	g.mu.Lock()
	g.replicasLocal = max(g.replicasLocal, n)
	g.mu.Unlock()
}

// replicasEvery is how often the recorded replica count is read again.
const replicasEvery = 30 * time.Second

// replicasStep reads the recorded replica count (at start, then every
// replicasEvery) and raises it to what this node saw.
func (g *Guard) replicasStep(ctx context.Context) {
	if g.cfg.OnReplicasSeen == nil {
		return
	}
	g.mu.Lock()
	local, stored, readAt := g.replicasLocal, g.replicasStored, g.replicasReadAt
	g.mu.Unlock()
	if stored >= 0 && local <= stored && time.Since(readAt) < replicasEvery {
		return
	}
	p := path.Join(g.base, "mysql", "replicas")
	var seen int
	err := g.call(ctx, func() error {
		for attempt := 0; attempt < 5; attempt++ {
			data, st, err := g.conn.Get(p)
			var rec struct {
				Seen int `json:"seen"`
			}
			switch {
			case errors.Is(err, zk.ErrNoNode):
				rec.Seen = 0
			case err != nil:
				return err
			default:
				if json.Unmarshal(data, &rec) != nil {
					rec.Seen = 0 // unreadable: rewritten below
				}
			}
			seen = rec.Seen
			if local <= seen {
				return nil
			}
			b, _ := json.Marshal(map[string]any{"seen": local, "at_ms": time.Now().UnixMilli(), "by": g.cfg.Self})
			if errors.Is(err, zk.ErrNoNode) {
				if err := g.ensure(path.Dir(p)); err != nil {
					return err
				}
				_, err = g.conn.Create(p, b, 0, g.acl)
			} else {
				_, err = g.conn.Set(p, b, st.Version)
			}
			if errors.Is(err, zk.ErrNodeExists) || errors.Is(err, zk.ErrBadVersion) {
				continue
			}
			if err == nil {
				seen = local
			}
			return err
		}
		return errors.New("zkguard: the replica record changed under 5 attempts in a row")
	})
	if err != nil {
		return
	}
	g.mu.Lock()
	grew := seen > g.replicasStored
	g.replicasStored, g.replicasReadAt = seen, time.Now()
	g.mu.Unlock()
	if grew && seen > 0 {
		g.cfg.OnReplicasSeen(seen)
	}
}

// modifyLedger reads biz's ledger, lets fn change it, and writes it back
// when fn returns true (compare-and-set on the znode version, retried).
func (g *Guard) modifyLedger(ctx context.Context, biz string, fn func(l *ledger) bool) error {
	return g.modifyLedgerRaw(ctx, biz, func(l *ledger, _ []byte) bool { return fn(l) }, nil)
}

// modifyLedgerRaw is modifyLedger whose fn also sees the znode's content
// as read (nil when absent), and whose wrote, when set, is told the
// content each write attempt sends (before it is sent).
func (g *Guard) modifyLedgerRaw(ctx context.Context, biz string, fn func(l *ledger, raw []byte) bool, wrote func(b []byte)) error {
	p := path.Join(g.base, "segments", biz)
	return g.call(ctx, func() error {
		for attempt := 0; attempt < 20; attempt++ {
			data, st, err := g.conn.Get(p)
			if errors.Is(err, zk.ErrNoNode) {
				var l ledger
				if !fn(&l, nil) {
					return nil
				}
				if err := g.ensure(path.Dir(p)); err != nil {
					return err
				}
				b, _ := json.Marshal(l)
				if wrote != nil {
					wrote(b)
				}
				_, err := g.conn.Create(p, b, 0, g.acl)
				if errors.Is(err, zk.ErrNodeExists) {
					continue
				}
				return err
			}
			if err != nil {
				return err
			}
			var l ledger
			if len(data) > 0 {
				if err := json.Unmarshal(data, &l); err != nil {
					return fmt.Errorf("zkguard: %s holds %q, not a ledger: %w (remove it only when no node runs)", p, data, err)
				}
			}
			if !fn(&l, data) {
				return nil
			}
			b, _ := json.Marshal(l)
			if wrote != nil {
				wrote(b)
			}
			if _, err := g.conn.Set(p, b, st.Version); errors.Is(err, zk.ErrBadVersion) {
				continue
			} else {
				return err
			}
		}
		return errors.New("zkguard: the ledger changed under 20 attempts in a row")
	})
}

// pendingSegment is a segment served unverified (ZooKeeper unreachable,
// replication judged lossless), not yet in the ledger.
type pendingSegment struct {
	biz   string
	r     segment.Range
	again bool // recorded before a restore: overlapping is expected
	// last is the latest attempt to record it (nil before the first),
	// shared by the copies recordPending works on.
	last *ledgerAttempt
}

// ledgerAttempt is one attempt to record a pending segment. An attempt
// that timed out (cluster.Call gives up on it) may still go on and land
// its write; the next attempt then finds the segment in the ledger, which
// alone would read as an overlap, the alarm that numbers may have been
// served twice. So an attempt keeps what it sent and what it found: a
// ledger holding exactly what the previous attempt sent is that attempt's
// write, and its finding stands.
type ledgerAttempt struct {
	mu      sync.Mutex
	sent    []byte // the content of its latest write (nil: none sent)
	overlap bool   // what that write's read found
	high    int64
	earlier *ledgerAttempt // the attempt before it that may also still land (immutable)
}

// landed reports whether raw is exactly what t or an attempt before it
// sent last, and what that attempt found (looking back at most 8).
func (t *ledgerAttempt) landed(raw []byte) (ok, overlap bool, high int64) {
	for i := 0; t != nil && i < 8; i, t = i+1, t.earlier {
		t.mu.Lock()
		sent, o, h := t.sent, t.overlap, t.high
		t.mu.Unlock()
		if sent != nil && bytes.Equal(raw, sent) {
			return true, o, h
		}
	}
	return false, false, 0
}

// recordPending records the segments served unverified in the ledger
// (the barrier loop calls it every round). Without that, a segment served
// while ZooKeeper was down is unknown to the ledger, and a later lossy
// failover hands it out again (issue 29 hole f). A segment that overlaps
// a recorded one is recorded anyway (merged) and logged as an error: its
// numbers may have been served twice already.
func (g *Guard) recordPending(ctx context.Context) {
	g.pendMu.Lock()
	todo := append([]pendingSegment(nil), g.pending...)
	g.pendMu.Unlock()
	done := 0
	for _, p := range todo {
		prev := p.last
		// This attempt's findings, written by its function, which may go
		// on after a timeout (hence the lock, and a fresh attempt each
		// time: an abandoned one must not write into the next one's).
		a := &ledgerAttempt{earlier: prev}
		var readOverlap bool // fn's finding, for wrote: both run in the call's goroutine
		var readHigh int64
		err := g.modifyLedgerRaw(ctx, p.biz, func(l *ledger, raw []byte) bool {
			readHigh, readOverlap = l.overlaps(p.r)
			// (Looked at each time: an earlier attempt may still be
			// retrying its write in the background.)
			if ok, o, h := prev.landed(raw); ok {
				// An earlier attempt's write landed after it was given
				// up on: the segment is in the ledger by that write, and
				// that write's own read says whether it overlapped.
				readHigh, readOverlap = h, o
			}
			l.merge(p.r)
			return true
		}, func(b []byte) {
			a.mu.Lock()
			a.sent, a.overlap, a.high = b, readOverlap, readHigh
			a.mu.Unlock()
		})
		a.mu.Lock()
		sent, overlap, high := a.sent != nil, a.overlap, a.high
		a.mu.Unlock()
		if err != nil {
			if sent {
				// It may still land: the next attempt must know it.
				g.pendMu.Lock()
				for i := range g.pending {
					if g.pending[i].last == prev {
						g.pending[i].last = a
					}
				}
				g.pendMu.Unlock()
			}
			break // ZooKeeper still unreachable: keep the rest, in order
		}
		done++
		if p.again {
			continue // after a restore: this node's own ranges, recorded again
		}
		g.lateRecorded.Add(1)
		if overlap {
			g.lateOverlaps.Add(1)
			g.log.Error("a segment served while ZooKeeper was unreachable overlaps a segment in the ledger: numbers in the overlap may have been served twice (the replication was judged lossless when it was served)",
				zap.String("biz", p.biz), zap.Int64("first", p.r.First), zap.Int64("last", p.r.Last), zap.Int64("ledger_high", high))
		} else {
			g.log.Info("segment served while ZooKeeper was unreachable recorded in the ledger",
				zap.String("biz", p.biz), zap.Int64("first", p.r.First), zap.Int64("last", p.r.Last))
		}
	}
	if done > 0 {
		g.pendMu.Lock()
		g.pending = g.pending[done:]
		g.pendMu.Unlock()
	}
}

// remember keeps r among the segments this node handed out.
func (g *Guard) remember(biz string, r segment.Range) {
	g.pendMu.Lock()
	defer g.pendMu.Unlock()
	l := g.mine[biz]
	if l == nil {
		l = &ledger{}
		g.mine[biz] = l
	}
	l.merge(r)
}

// requeueMine queues every segment this node remembers handing out to be
// recorded again (the ledger's restore rule: a ZooKeeper restored from an
// older copy lost the ranges recorded after the copy).
func (g *Guard) requeueMine() {
	g.pendMu.Lock()
	defer g.pendMu.Unlock()
	for biz, l := range g.mine {
		for _, x := range l.Ranges {
			g.pending = append(g.pending, pendingSegment{biz: biz, r: segment.Range{First: x[0], Last: x[1]}, again: true, last: &ledgerAttempt{}})
		}
	}
}

// merge adds r whether or not it overlaps recorded ranges (a segment
// already served: the ledger must cover it).
func (l *ledger) merge(r segment.Range) {
	var keep [][2]int64
	for _, x := range l.Ranges {
		if x[0] <= r.Last && r.First <= x[1] {
			r.First, r.Last = min(r.First, x[0]), max(r.Last, x[1])
			continue
		}
		keep = append(keep, x)
	}
	l.Ranges = keep
	l.add(r)
}

// overlaps reports whether r overlaps a recorded range, with the highest
// recorded end.
func (l *ledger) overlaps(r segment.Range) (int64, bool) {
	var high int64
	hit := false
	for _, x := range l.Ranges {
		high = max(high, x[1])
		if x[0] <= r.Last && r.First <= x[1] {
			hit = true
		}
	}
	return high, hit
}

// add inserts r (disjoint from every range), merges adjacent ranges and
// keeps at most maxRanges.
func (l *ledger) add(r segment.Range) {
	rs := append(l.Ranges, [2]int64{r.First, r.Last})
	sort.Slice(rs, func(i, j int) bool { return rs[i][0] < rs[j][0] })
	out := rs[:1]
	for _, x := range rs[1:] {
		if last := &out[len(out)-1]; last[1]+1 == x[0] {
			last[1] = x[1]
		} else {
			out = append(out, x)
		}
	}
	for len(out) > maxRanges {
		out[1][0] = out[0][0]
		out = out[1:]
	}
	l.Ranges = out
}
