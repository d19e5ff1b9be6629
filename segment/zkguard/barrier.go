package zkguard

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/idgen/idgen/cluster/zksession"
	"github.com/idgen/idgen/segment"
)

// Server is what the barrier needs of the MySQL store.
type Server interface {
	// Server is the identity of the server behind the store's newest
	// connection ("" before the first).
	Server() string
	// Ping makes the store open a connection when its idle ones are
	// gone, so a server change is noticed.
	Ping(ctx context.Context) error
}

// serverRecord is /<root>/<cluster>/mysql/server.
type serverRecord struct {
	Server    string `json:"server"`
	Gen       int64  `json:"gen"`
	ChangedMs int64  `json:"changed_ms"`
	By        string `json:"by"`
}

// memberRecord is /<root>/<cluster>/mysql/members/<node>~<instance>:
// persistent, so a node paused past its ZooKeeper session, or cut off from
// ZooKeeper but not from MySQL, still counts (issue 29 hole c). Membership
// means memory: a process that may still serve ORDERED from memory counts
// in every barrier until it provably cannot, which is when UntilMs (on its
// wall clock) has passed by the clock-skew allowance: it refuses ORDERED
// past its bound unless it renewed it. A clean stop deletes the record.
//
// One record per process, not per node name: a process killed and
// restarted under the same name took its memory with it, and what it
// answered last may be lost by a lossy failover soon after. Had the new
// process overwritten the old record, the barrier would count the name as
// acknowledged and open at once, with nothing said; with its own record
// the old process is waited for until its bound passes and then counted
// gone, logged and alerted on (the simulator's seed 1120). The same holds
// for an old process that is only paused while its replacement runs.
// The znode's name is the member's identity (memberOf); records of the
// version before this one are named <node> alone and read the same way.
type memberRecord struct {
	Gen     int64  `json:"gen"` // the generation whose rows it raised
	Server  string `json:"server"`
	AtMs    int64  `json:"at_ms"`
	UntilMs int64  `json:"until_ms"` // serving until (wall clock, ms)
}

// Member names one process in the barrier: its node (Config.Self) and its
// Config.Instance ("" for a record of the previous version, one per node).
type Member struct {
	Node, Instance string
}

func (m Member) String() string {
	if m.Instance == "" {
		return m.Node
	}
	return m.Node + "~" + m.Instance
}

// memberOf names the member whose record is the znode named k.
func memberOf(k string) Member {
	node, inst, _ := strings.Cut(k, "~")
	return Member{Node: node, Instance: inst}
}

// ErrBarrier wraps the refusal of ORDERED while the gate is closed.
var ErrBarrier = errors.New("ORDERED paused until every node raised the ORDERED rows it remembers on the cluster's MySQL server")

// Enter implements segment.Gate.
func (g *Guard) Enter() (uint64, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.open {
		return 0, fmt.Errorf("%w: %w (%s)", segment.ErrUnavailable, ErrBarrier, g.why)
	}
	if err := g.boundLocked(); err != nil {
		return 0, err
	}
	return g.token, nil
}

// ErrNotMember wraps the refusal of ORDERED once this node's membership
// bound passed without a renewal: the other nodes count it gone then, and
// may reserve below what it remembers.
var ErrNotMember = errors.New("ORDERED paused: this node could not renew its membership of the cluster's failover barrier in ZooKeeper in time, so the other nodes no longer wait for it; it serves again once renewed")

// boundLocked is nil while this node's own "serving until" bound has not
// passed, on the monotonic clock and on the wall clock (a frozen VM's
// monotonic clock may stop; the wall clock is what the others compare).
func (g *Guard) boundLocked() error {
	if faultEphemeralMembers() || g.cfg.Disabled {
		// Disabled: no member record is ever written, so there is no
		// bound; the gate stays open, as if the guard did not exist (the
		// negative control must exercise ORDERED too, not refuse it).
		return nil
	}
	if g.selfUntil.IsZero() {
		return fmt.Errorf("%w: %w", segment.ErrUnavailable, ErrNotMember)
	}
	now := time.Now()
	if (!now.Before(g.selfUntil) || g.cfg.Now().UnixMilli() >= g.selfUntilMs) && !now.Before(g.unverifiedUntil) {
		return fmt.Errorf("%w: %w", segment.ErrUnavailable, ErrNotMember)
	}
	return nil
}

// unverifiedFor is how long one look at the replication lets the bound
// pass: four looks' periods, so a look that takes a moment (a verdict
// read again) does not leave a gap.
func (g *Guard) unverifiedFor() time.Duration { return 4 * unverifiedEvery }

// refreshUnverified runs every unverifiedEvery while the gate is open.
// When this node's bound is about to pass without a renewal (ZooKeeper
// out of reach: an outage, or this node cut off), it asks whether the
// store's replication can lose a reservation (Config.ServeUnverified: a
// fresh verdict); when it cannot, the bound may pass and ORDERED goes on.
//
// Why that is safe: the bound exists so the others' barrier, after a
// MySQL server change, may count this node gone and reserve without the
// rows it remembers. A failover that loses nothing leaves nothing to
// raise, so counting this node gone costs nothing, and during an outage
// of the whole ensemble no barrier runs anywhere. A server change seen
// by this node closes its gate as before (the barrier needs ZooKeeper:
// ORDERED then waits for it). With replication that can lose (async
// replicas, semi-sync degraded, a verdict that cannot be read) the bound
// refuses ORDERED as it always did.
func (g *Guard) refreshUnverified() {
	if g.cfg.ServeUnverified == nil && !faultBoundAnyReplication() {
		return
	}
	g.mu.Lock()
	due := !g.selfUntil.IsZero() && time.Until(g.selfUntil) < g.cfg.MemberLease/3
	g.mu.Unlock()
	if !due {
		g.mu.Lock()
		if g.unverifiedOn {
			g.unverifiedOn = false
			g.log.Info("ORDERED barrier membership renewed in ZooKeeper again")
		}
		g.mu.Unlock()
		return
	}
	safe := faultBoundAnyReplication() || g.cfg.ServeUnverified()
	g.mu.Lock()
	defer g.mu.Unlock()
	if !safe {
		g.unverifiedUntil = time.Time{}
		return
	}
	g.unverifiedUntil = time.Now().Add(g.unverifiedFor())
	if !g.unverifiedOn {
		g.unverifiedOn = true
		g.log.Warn("ORDERED barrier membership cannot be renewed in ZooKeeper; ORDERED goes on past its bound because the MySQL replication cannot lose a reservation (a failover leaves the barrier nothing to raise)",
			zap.Time("bound", g.selfUntil))
	}
}

// Serving is nil while this node may answer ORDERED from what it
// remembers: its gate is open and its membership bound has not passed.
// An owner answering from a cached reservation (no store call, so no
// Enter) asks it first.
func (g *Guard) Serving() error {
	_, err := g.Enter()
	return err
}

// WaitOpen waits until the gate is open or ctx ends, and reports whether
// it is open (the server waits for the first round at start, so a node
// that starts in a quiet cluster serves ORDERED as soon as it is ready).
func (g *Guard) WaitOpen(ctx context.Context) bool {
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if _, err := g.Enter(); err == nil {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
}

// Check implements segment.Gate.
func (g *Guard) Check(token uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.open || g.token != token {
		return fmt.Errorf("%w: %w", segment.ErrUnavailable, ErrBarrier)
	}
	return g.boundLocked()
}

// ServerChanged closes the gate at once (register it with the store's
// OnServerChange: it runs before the new connection serves a statement)
// and wakes the barrier.
func (g *Guard) ServerChanged(old, new string) {
	if g.cfg.Disabled {
		return
	}
	g.closeServer("server changed from " + old + " to " + new)
}

// ServerChanges implements segment.Gate: how many times a
// MySQL server change closed the gate (also when it found it closed; one
// change may count twice: a new connection's server, then the record).
func (g *Guard) ServerChanges() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.serverChanges
}

// closeServer is close for a MySQL server change: counted in
// ServerChanges, whether or not the gate was open.
func (g *Guard) closeServer(why string) {
	g.mu.Lock()
	g.serverChanges++
	g.mu.Unlock()
	g.close(why)
}

func (g *Guard) close(why string) {
	g.mu.Lock()
	if g.open {
		g.open = false
		g.token++
		g.closedAt = time.Now()
		g.why = why
		g.log.Warn("ORDERED gate closed: "+why, zap.Uint64("token", g.token))
	}
	g.mu.Unlock()
	select {
	case g.kick <- struct{}{}:
	default:
	}
}

// StartBarrier runs the barrier until Close. The gate is closed until the
// first round finds every live node acknowledging the cluster's current
// server (or BarrierWait passed): a node that starts during another
// node's barrier waits with it. r.Flush raises the ORDERED rows
// this node remembers on the store (ordered.Allocator.Remembered into
// mysqlstore.Store.RaiseOrdered); r.Remembered and r.Raise carry them over
// a clean stop (parted.go).
func (g *Guard) StartBarrier(store Server, r Repair) {
	if g.cfg.Disabled {
		return
	}
	g.mu.Lock()
	g.started = true
	g.repair = r
	g.mu.Unlock()
	go g.barrierLoop(store, r.Flush)
}

// unverifiedEvery is how often the bound's replication look runs
// (refreshUnverified), on its own ticker: a barrier round may take
// seconds while ZooKeeper does not answer (each call runs to its
// timeout), longer than one look lasts.
const unverifiedEvery = 250 * time.Millisecond

func (g *Guard) barrierLoop(store Server, flush func(ctx context.Context) error) {
	defer close(g.done)
	looks := make(chan struct{})
	go func() {
		defer close(looks)
		t := time.NewTicker(unverifiedEvery)
		defer t.Stop()
		for {
			select {
			case <-g.stop:
				return
			case <-t.C:
			}
			g.mu.Lock()
			open := g.open
			g.mu.Unlock()
			if open {
				g.refreshUnverified()
			}
		}
	}()
	defer func() { <-looks }()
	for {
		g.barrierStep(store, flush)
		// An open gate only watches for another node's server change (this
		// node's own connections report theirs at once): poll slowly, but
		// often enough that the member bound is renewed (due at a third
		// of MemberLease) well before it runs out: with a short lease (the
		// simulator's 1 s) a 1 s poll let the bound lapse before each
		// renewal, and ORDERED was refused for a few milliseconds every
		// second.
		every := min(pollOpen, g.cfg.MemberLease/6)
		g.mu.Lock()
		if !g.open {
			every = pollClosed
		}
		g.mu.Unlock()
		t := time.NewTimer(every)
		select {
		case <-g.stop:
			t.Stop()
			return
		case <-t.C:
		case <-g.kick:
			t.Stop()
		}
	}
}

// barrierStep is one round: agree on the server record, acknowledge its
// generation once the rows are raised, open the gate when every member
// has, or provably cannot serve any more.
func (g *Guard) barrierStep(store Server, flush func(ctx context.Context) error) {
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.BarrierWait)
	defer cancel()
	g.recordPending(ctx)
	g.replicasStep(ctx)
	err := g.round(ctx, store, flush)
	g.mu.Lock()
	open, closedAt, timedOut := g.open, g.closedAt, g.timedOut
	g.mu.Unlock()
	if open {
		if err != nil && !errors.Is(err, segment.ErrUnavailable) {
			g.log.Warn("ORDERED barrier round failed", zap.Error(err))
		}
		return
	}
	waited := time.Since(closedAt)
	if faultEphemeralMembers() {
		// Hole c reopened: the gate opens after BarrierWait whoever may
		// still serve.
		if waited >= g.cfg.BarrierWait {
			g.timeouts.Add(1)
			g.openGate()
			g.log.Error("ORDERED gate opened without every node's acknowledgement (IDGEN_FAULT_BARRIER_EPHEMERAL_MEMBERS=1)", zap.Duration("waited", waited), zap.Error(err))
		}
		return
	}
	if waited >= g.cfg.BarrierWait && !timedOut {
		// A member that may still serve keeps the gate closed: opening
		// would let this node reserve below a number it may still hand
		// out. Its bound ends the wait (it renews only while it can raise
		// its rows), so this is counted and logged, not acted on.
		g.mu.Lock()
		g.timedOut = true
		g.mu.Unlock()
		g.timeouts.Add(1)
		g.log.Warn("ORDERED barrier: a member has not raised its rows within the barrier wait; the gate stays closed until it does or its serving bound passes",
			zap.Duration("waited", waited), zap.Duration("member_lease", g.cfg.MemberLease), zap.Error(err))
	}
	// An honest member's bound is at most MemberLease plus the skew ahead
	// of any of this node's reads; a record further ahead has a clock
	// running ahead (it stops serving earlier than its record says) or is
	// not a live node's. Past this cap the gate opens.
	// Only a round that got as far as reading the members applies it:
	// without an answer from ZooKeeper nothing is known about them, and a
	// node that has not raised its own rows must not open (it does not
	// renew its bound meanwhile, so it would refuse ORDERED anyway).
	if limit := g.cfg.BarrierWait + g.cfg.MemberLease + 2*g.cfg.MaxClockSkew; waited >= limit && errors.Is(err, errWaiting) {
		g.openGate()
		g.log.Error("ORDERED gate opened without every member's acknowledgement after the longest a live member's bound can last: a member record's bound lies too far ahead (a clock ahead of this node's by more than the allowed skew); keys remembered only by that member may repeat numbers",
			zap.Duration("waited", waited), zap.Error(err))
	}
}

func (g *Guard) openGate() {
	g.mu.Lock()
	g.open = true
	g.timedOut = false
	g.mu.Unlock()
}

// round returns nil when the gate may open (and opens it), an error saying
// what it waits for otherwise.
func (g *Guard) round(ctx context.Context, store Server, flush func(ctx context.Context) error) error {
	// A closed gate, or a record with a newer generation, needs the
	// server this node's connections reach now.
	cur := store.Server()
	var rec serverRecord
	restored := ""
	if g.sess != nil {
		if v := g.sess.View(); v.Restores != g.seenRestores {
			g.seenRestores = v.Restores
			restored = "the ZooKeeper session detected a wipe or a restore: " + v.RestoreWhy
		}
	}
	recPath := path.Join(g.base, "mysql", "server")
	g.mu.Lock()
	acked, lastMzxid := g.acked, g.lastMzxid
	g.mu.Unlock()
	// The closure works on its own rec and restored and hands them over
	// when it ends: on a timeout g.call returns while the closure may run
	// on, so what it would write in place could be read meanwhile (the
	// data race members had). A closure given up on leaves restored as it
	// was before the call.
	var out struct {
		mu       sync.Mutex
		ended    bool
		rec      serverRecord
		restored string
	}
	before := restored
	err := g.call(ctx, func() error {
		var rec serverRecord
		restored := before
		defer func() {
			out.mu.Lock()
			out.ended, out.rec, out.restored = true, rec, restored
			out.mu.Unlock()
		}()
		data, st, err := g.conn.Get(recPath)
		if errors.Is(err, zk.ErrNoNode) {
			if acked > 0 && restored == "" {
				restored = "the cluster's MySQL server record is gone from ZooKeeper"
			}
			if cur == "" {
				return nil
			}
			if err := g.ensure(path.Dir(recPath)); err != nil {
				return err
			}
			rec = serverRecord{Server: cur, Gen: 1, ChangedMs: time.Now().UnixMilli(), By: g.cfg.Self}
			b, _ := json.Marshal(rec)
			if _, err := g.conn.Create(recPath, b, 0, g.acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
				return err
			}
			return errRecordCreated
		}
		if err != nil {
			return err
		}
		if err := json.Unmarshal(data, &rec); err != nil {
			return fmt.Errorf("zkguard: %s holds %q: %w", recPath, data, err)
		}
		if g.sess != nil {
			g.sess.NoteZxid(st.Mzxid)
		}
		// The record never goes back by itself: a lower generation than
		// this node acknowledged, or an older modification, is ZooKeeper
		// restored from an older copy (issue 29 hole d).
		switch {
		case restored != "":
		case rec.Gen < acked:
			restored = fmt.Sprintf("the generation of the cluster's MySQL server went back from %d to %d", acked, rec.Gen)
		case st.Mzxid < lastMzxid:
			restored = fmt.Sprintf("the cluster's MySQL server record went back from zxid 0x%x to 0x%x", lastMzxid, st.Mzxid)
		}
		g.mu.Lock()
		g.lastMzxid = st.Mzxid
		g.mu.Unlock()
		if cur != "" && rec.Server != cur {
			// This node reaches another server than the record names: a
			// failover the record has not seen yet (or this node is the
			// one behind: then its connections fail and it retries).
			next := serverRecord{Server: cur, Gen: rec.Gen + 1, ChangedMs: time.Now().UnixMilli(), By: g.cfg.Self}
			b, _ := json.Marshal(next)
			if _, err := g.conn.Set(recPath, b, st.Version); err != nil && !errors.Is(err, zk.ErrBadVersion) {
				return err
			}
			g.log.Warn("MySQL server recorded for the cluster changed; every node raises the ORDERED rows it remembers",
				zap.String("old", rec.Server), zap.String("new", cur), zap.Int64("gen", next.Gen))
			return errRetry
		}
		return nil
	})
	out.mu.Lock()
	if out.ended {
		rec, restored = out.rec, out.restored
	}
	out.mu.Unlock()
	if restored != "" && !faultNoRestoreReset() {
		// The restore rule: what this node acknowledged, and the ledger
		// ranges it recorded, may be gone from ZooKeeper. Forget the
		// acknowledgement, so this round raises every remembered row
		// again and acknowledges the generation ZooKeeper holds now, and
		// record this node's segments again.
		g.restores.Add(1)
		g.mu.Lock()
		g.acked, g.lastMzxid = 0, 0
		g.restoredAt = time.Now()
		g.mu.Unlock()
		acked = 0
		g.requeueMine()
		g.log.Warn("ZooKeeper was restored from an older copy or wiped: raising the remembered ORDERED rows again and recording this node's segments in the ledger again",
			zap.String("why", restored))
		g.close("ZooKeeper restored: " + restored)
	}
	if errors.Is(err, errRecordCreated) {
		g.close("the cluster's MySQL server recorded for the first time")
		return err
	}
	if errors.Is(err, errRetry) {
		g.closeServer("the cluster's MySQL server record changed")
		return err
	}
	if err != nil {
		return err
	}
	if rec.Gen == 0 {
		return errors.New("zkguard: no MySQL server known yet")
	}
	if rec.Gen > acked {
		if acked > 0 {
			g.closeServer(fmt.Sprintf("generation %d of the cluster's MySQL server", rec.Gen))
		}
		// Reach the recorded server first: idle connections to a dead
		// one are replaced by a new connection, which reports its server.
		// A node that cannot raise its rows does not renew its bound
		// either: it stops serving from memory once the bound passes, and
		// the others stop waiting for it.
		if err := store.Ping(ctx); err != nil {
			return fmt.Errorf("reach the MySQL server: %w", err)
		}
		if s := store.Server(); s != rec.Server {
			return fmt.Errorf("this node reaches MySQL server %s, the cluster's record names %s", s, rec.Server)
		}
		start := time.Now()
		if err := flush(ctx); err != nil {
			return fmt.Errorf("raise the remembered ORDERED rows: %w", err)
		}
		if acked > 0 {
			g.log.Info("ORDERED rows this node remembers raised on the new MySQL server",
				zap.String("server", rec.Server), zap.Int64("gen", rec.Gen), zap.Duration("took", time.Since(start)))
		}
		if err := g.writeMember(ctx, rec); err != nil {
			return err
		}
		g.mu.Lock()
		g.acked = rec.Gen
		g.mu.Unlock()
	} else if g.renewDue() {
		if err := g.writeMember(ctx, rec); err != nil {
			return err
		}
	}
	g.mu.Lock()
	open := g.open
	g.mu.Unlock()
	if open {
		return nil
	}
	missing, gone, err := g.members(ctx, rec.Gen)
	if err != nil {
		return err
	} else if len(missing) > 0 {
		return fmt.Errorf("%w %s", errWaiting, strings.Join(missing, ", "))
	}
	if left := g.restoreHold(); left > 0 {
		return fmt.Errorf("%w the members whose records ZooKeeper's restore lost (%s more)", errWaiting, left.Round(time.Millisecond))
	}
	// No member is missing: a node that left during this barrier removed
	// its record after writing its marks, so they are read now.
	g.mu.Lock()
	raise := g.repair.Raise
	g.mu.Unlock()
	if err := g.raiseParted(ctx, raise); err != nil {
		return err
	}
	g.complete.Add(1)
	g.expired.Add(uint64(len(gone)))
	if len(gone) > 0 {
		if g.cfg.OnMembersGone != nil {
			g.cfg.OnMembersGone(gone)
		}
		names := make([]string, len(gone))
		for i, m := range gone {
			names[i] = m.String()
		}
		g.log.Warn("ORDERED barrier: members whose serving bound passed without raising their rows count as gone (they cannot serve from memory any more); ORDERED keys only they remembered are protected only by lossless replication, as after a crash",
			zap.Strings("members", names), zap.Int64("gen", rec.Gen))
	}
	g.openGate()
	g.mu.Lock()
	waited, closes := time.Since(g.closedAt), g.token
	g.mu.Unlock()
	if closes == 0 {
		// The gate's first opening, at start: every start does this, no
		// failover happened, nothing needs a look.
		g.log.Info("ORDERED gate open: the cluster's MySQL server is known and every member raised its rows on it",
			zap.String("server", rec.Server), zap.Int64("gen", rec.Gen), zap.Duration("took", waited))
		return nil
	}
	// Open after a close (a server change, a restore, a new generation):
	// the close was warned about, and so is the end of the outage it
	// caused to ORDERED.
	g.log.Warn("ORDERED gate open again: every member raised the rows it remembers on the new MySQL server, or cannot serve any more",
		zap.String("server", rec.Server), zap.Int64("gen", rec.Gen), zap.Duration("closed_for", waited))
	return nil
}

var (
	errRetry = errors.New("server record changed")
	// errRecordCreated is errRetry when this node created the record (the
	// cluster's first): not a server change (ServerChanges).
	errRecordCreated = fmt.Errorf("%w (created)", errRetry)
	errSuperseded    = errors.New("a later write of this process's member record started")
	errWaiting       = errors.New("waiting for") // this node acknowledged; members have not
)

// renewDue reports whether this node's bound should be renewed now (a
// third of the lease has gone by since the last renewal).
func (g *Guard) renewDue() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.renewedAt.IsZero() || time.Since(g.renewedAt) >= g.cfg.MemberLease/3
}

// memberPath is this process's member record.
func (g *Guard) memberPath() string {
	name := Member{Node: g.cfg.Self, Instance: g.cfg.Instance}.String()
	if faultMemberPerNode() {
		name = g.cfg.Self // the hole reopened: a restart overwrites its predecessor's record
	}
	return path.Join(g.base, "mysql", "members", name)
}

// writeMember writes this node's member record: the generation whose rows
// it raised and its new bound, computed from before the write (so the
// node's own bound never ends later than the one the others read).
//
// A write that timed out goes on in the background (cluster.Call), so it
// may reach ZooKeeper after a later renewal did: it must not overwrite
// that renewal's bound with its own earlier one, or the others count this
// node gone while it still serves from memory under the later bound
// (under scheduling lag: go test -race of the simulator's seed 1120 on a
// loaded machine). Each write is numbered; one that is not the newest
// when it has read the record changes nothing. Reading first matters: a
// newer write that set the record before this read bumped the number
// before it, and one that sets it after this read makes this write's Set
// fail on the version.
func (g *Guard) writeMember(ctx context.Context, rec serverRecord) error {
	start, startWall := time.Now(), g.cfg.Now()
	untilMs := startWall.Add(g.cfg.MemberLease).UnixMilli()
	b, _ := json.Marshal(memberRecord{Gen: rec.Gen, Server: rec.Server, AtMs: startWall.UnixMilli(), UntilMs: untilMs})
	p := g.memberPath()
	flags := int32(0)
	if faultEphemeralMembers() {
		flags = zk.FlagEphemeral // hole c reopened: membership is a session
	}
	g.mu.Lock()
	g.memberWrites++
	seq := g.memberWrites
	g.mu.Unlock()
	superseded := func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return seq != g.memberWrites && !faultStaleMemberWrite()
	}
	err := g.call(ctx, func() error {
		_, st, err := g.conn.Get(p)
		if superseded() {
			return errSuperseded
		}
		if errors.Is(err, zk.ErrNoNode) {
			if err := g.ensure(path.Dir(p)); err != nil {
				return err
			}
			_, err := g.conn.Create(p, b, flags, g.acl)
			return err // ErrNodeExists: a concurrent write of this process's (only with the fault switch: of its previous process); the next round writes again
		}
		if err != nil {
			return err
		}
		if flags != 0 && st.EphemeralOwner != g.conn.SessionID() {
			if err := g.conn.Delete(p, st.Version); err != nil && !errors.Is(err, zk.ErrNoNode) {
				return err
			}
			return errRetry
		}
		_, err = g.conn.Set(p, b, st.Version)
		return err
	})
	if err != nil {
		return err
	}
	g.mu.Lock()
	g.selfUntil, g.selfUntilMs, g.renewedAt = start.Add(g.cfg.MemberLease), untilMs, start
	g.mu.Unlock()
	return nil
}

// members lists the members that have not acknowledged gen and may still
// serve (missing), and those whose bound passed (gone); it deletes records
// long past their bound (a crashed process's).
//
// The lists are the closure's own, handed over when it ends: on a timeout
// g.call returns while the closure may still run, and the results it
// wrote in place were read meanwhile (a data race: go test -race,
// TestIntegration_CutOffStaysClosed on a loaded machine). They are read
// only after a call that returned the closure's answer.
func (g *Guard) members(ctx context.Context, gen int64) ([]string, []Member, error) {
	dir := path.Join(g.base, "mysql", "members")
	now := g.cfg.Now()
	cutFrom, backFor := g.ownOutage(now)
	var out struct {
		missing []string
		gone    []Member
	}
	err := g.call(ctx, func() error {
		var missing []string
		var gone []Member
		defer func() { out.missing, out.gone = missing, gone }()
		kids, _, err := g.conn.Children(dir)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, k := range kids {
			data, st, err := g.conn.Get(path.Join(dir, k))
			if errors.Is(err, zk.ErrNoNode) {
				continue // left cleanly: it serves nothing
			}
			if err != nil {
				return err
			}
			var m memberRecord
			if json.Unmarshal(data, &m) != nil {
				missing = append(missing, k+" (unreadable record)")
				continue
			}
			if m.Gen >= gen {
				continue
			}
			who := memberOf(k)
			if faultEphemeralMembers() {
				missing = append(missing, who.String())
				continue
			}
			past := now.Sub(time.UnixMilli(m.UntilMs)) // on this node's clock
			switch {
			case past > g.cfg.MaxClockSkew+memberGC:
				if err := g.conn.Delete(path.Join(dir, k), st.Version); err == nil {
					g.log.Info("removed the barrier member record of a process gone for long", zap.Stringer("member", who),
						zap.Time("serving_until", time.UnixMilli(m.UntilMs)))
				}
				gone = append(gone, who)
			case past > g.cfg.MaxClockSkew && backFor < g.cfg.MemberLease && !time.UnixMilli(m.UntilMs).Add(g.cfg.MaxClockSkew).Before(cutFrom):
				// Its bound passed while this node could not reach
				// ZooKeeper either: the same outage (the ensemble down
				// or unreachable from everyone) may have kept it from
				// renewing, and it may be coming back with memory to
				// raise. Wait for it up to one member lease after this
				// node came back (seed 163 of the simulator: a member
				// counted gone 200 ms before it raised its rows).
				missing = append(missing, fmt.Sprintf("%s (its bound passed while this node could not reach ZooKeeper either; waited for up to %s after this node came back)", who, g.cfg.MemberLease))
			case past > g.cfg.MaxClockSkew:
				gone = append(gone, who)
			default:
				missing = append(missing, fmt.Sprintf("%s (may serve until %s)", who, time.UnixMilli(m.UntilMs).UTC().Format(time.RFC3339Nano)))
			}
		}
		// Nodes of the version before member records acknowledge in an
		// ephemeral /mysql/nodes/<node> (a rolling upgrade): such a node
		// has no bound, so it is waited for up to the hard cap.
		legacy := path.Join(g.base, "mysql", "nodes")
		kids, _, err = g.conn.Children(legacy)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return err
		}
		for _, k := range kids {
			data, _, err := g.conn.Get(path.Join(legacy, k))
			if errors.Is(err, zk.ErrNoNode) {
				continue
			}
			if err != nil {
				return err
			}
			var a struct {
				Gen int64 `json:"gen"`
			}
			if json.Unmarshal(data, &a) != nil || a.Gen < gen {
				missing = append(missing, k+" (a node of the previous version)")
			}
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	return out.missing, out.gone, nil
}

// restoreHold is how much longer the gate stays closed after ZooKeeper
// was restored or wiped (zero: not held). The restore took the member
// records with it, so the members a barrier must wait for are not all
// listed: a node still cut off (its client refused until it redials) has
// no record yet and would not be waited for, and a lossy failover in the
// same window lost what only it remembers (the simulator's seed 1032: a
// restore to the init copy, a SIGTERM, a failover; the restarted node
// opened its gate 200 ms after its start, before the node that had
// served the keys came back, and repeated them). A member that can still
// serve is back in ZooKeeper within zksession.RedialWithin (its refused
// client replaced) and writes its record again within one member lease,
// so the gate waits that long after the restore was noticed, by this
// node's guard or by its session (which also counts the restore a
// starting node's first check found). Measured in the simulator: a
// one-lease hold alone still failed seed 1032 in 2 runs of 4, the member
// back 35 ms after the gate opened.
func (g *Guard) restoreHold() time.Duration {
	if faultNoRestoreHold() {
		return 0
	}
	hold := g.cfg.MemberLease + zksession.RedialWithin
	g.mu.Lock()
	left := hold - time.Since(g.restoredAt)
	g.mu.Unlock()
	if g.sess != nil {
		if v := g.sess.View(); v.Restores > 0 {
			left = max(left, hold-v.At.Sub(v.RestoredAt))
		}
	}
	return max(left, 0)
}

// ownOutage returns when this node's last ZooKeeper outage began, on its
// wall clock at now, and how long its session has been usable since
// (a large duration when it never had an outage the session reports, or
// without a shared session).
func (g *Guard) ownOutage(now time.Time) (from time.Time, backFor time.Duration) {
	if g.sess == nil || faultNoOutageGrace() {
		return time.Time{}, time.Duration(math.MaxInt64)
	}
	v := g.sess.View()
	if !v.Has || v.UsableSince.IsZero() {
		return time.Time{}, time.Duration(math.MaxInt64)
	}
	return now.Add(-v.At.Sub(v.OutageFrom)), v.At.Sub(v.UsableSince)
}

// leave deletes this node's member record on a clean stop, so the next
// barrier does not wait for a node that serves nothing; this node's bound
// ends first, so nothing is served from memory after it. Its marks are
// written first as parted records, which later barriers raise.
func (g *Guard) leave() {
	g.mu.Lock()
	g.selfUntil, g.selfUntilMs = time.Time{}, 0
	g.open = false
	g.mu.Unlock()
	g.mu.Lock()
	remembered := g.repair.Remembered
	g.mu.Unlock()
	if remembered != nil && !faultIgnoreParted() {
		g.leaveParted(remembered)
	}
	g.mu.Lock()
	g.memberWrites++ // a renewal still under way must not write the record again
	g.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), g.cfg.Timeout)
	defer cancel()
	err := g.call(ctx, func() error {
		err := g.conn.Delete(g.memberPath(), -1)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		return err
	})
	if err != nil {
		g.log.Warn("could not remove this node's barrier member record; the next failover barrier waits for its bound to pass", zap.Error(err),
			zap.Duration("member_lease", g.cfg.MemberLease))
	}
}
