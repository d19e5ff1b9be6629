package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/cluster/zksession"
)

// ZKLease is a worker slot claimed in ZooKeeper (see Register). Its
// methods are safe for concurrent use.
type ZKLease struct {
	cfg     Config
	log     *zap.Logger
	l       layout
	acl     []zk.ACL
	conn    ZK                 // the session's stable client handle
	sess    *zksession.Session // shared with the node's other guards, or the lease's own
	ownSess bool               // the lease opened sess and closes it
	props   string             // properties file path
	pid     int
	started time.Time

	cancel context.CancelFunc // stops the manager
	done   chan struct{}      // closed when the manager has exited
	extend chan struct{}      // RequestExtend's poke (buffer 1)
	once   sync.Once
	err    error // Close's result

	// mu guards the fields below. The manager goroutine writes them;
	// accessors read them.
	mu           sync.Mutex
	ownWaitSince time.Time // see ownClaimWait
	state        State
	meta         Meta
	metaOK       bool // meta compared with ZooKeeper's (false while degraded)
	slot         Slot
	hasSlot      bool
	sid          int64  // session that holds the slot (0: degraded or none)
	member       string // member znode path ("" if none)
	hw           int64  // highest high-water mark written (ZooKeeper or file)
	beatAt       time.Time
	offset       time.Duration
	offsetKnown  bool
	// lastVer is the version of last/<node> after this lease's last
	// write (or the read it claimed the slot at); every mark write is
	// conditional on it (rule 1). lastExists is false when the slot had
	// no mark: the first write creates it, and fails if someone else did.
	lastVer    int32
	lastExists bool
	token      string // identifies this lease's writes in lastData

	// The cluster record (see meta.go) as last read or written, its
	// znode's ctime and the ZooKeeper time read with it.
	rec      cluster.Record
	recCtime int64
	zkNow    cluster.Time
	// knownEpoch is the newest ensemble epoch this lease recorded.
	knownEpoch int64
	losses     int    // losses of ZooKeeper state detected (countLoss)
	lostReason string // why the session counted a restore, to record at the re-claim
	skipped    int    // unreadable last/<node> marks skipped (claimLRU)
	// cached is the properties file read at start (hasCached: found).
	cached    properties
	hasCached bool
	// zkContact is the local time a mark write confirmed by ZooKeeper was
	// last sent: the slot's claim lives at least a session timeout after
	// it (cached in the properties file for a degraded start).
	zkContact int64
	// ceiling caps the marks of a degraded start: the time the cached
	// slot's old claim may expire (0: no cap).
	ceiling int64
}

var _ Lease = (*ZKLease)(nil)

// Status is a snapshot of a lease for metrics and health checks.
type Status struct {
	State State
	// ZKConnected is true while the client holds a ZooKeeper session
	// (always false for a standalone lease).
	ZKConnected bool
	SessionID   int64
	Slot        Slot
	HasSlot     bool
	// HighWater is the highest high-water mark written for the slot.
	HighWater int64
	// LastHeartbeat is when the mark was last written successfully.
	LastHeartbeat time.Time
	// ClockOffset is the local clock minus ZooKeeper's at the last
	// heartbeat: the midpoint of the local times around the write minus the
	// last/<node> znode's mtime (stamped by the ZooKeeper leader). Only
	// meaningful when ClockOffsetKnown.
	ClockOffset      time.Duration
	ClockOffsetKnown bool
	// StateLosses counts the losses of ZooKeeper state this lease detected
	// (its own mark went back or vanished, the cluster record was gone or
	// re-created, or the ensemble refused its zxid); each marked the
	// cluster restored. UnreadableMarks counts slots skipped because their
	// last/<node> could not be decoded.
	StateLosses     int
	UnreadableMarks int
	// ClusterBoundMs is the local-clock millisecond before which a slot
	// taken now waits (one lead after the cluster's last restore or
	// ensemble epoch change), 0 when none applies.
	ClusterBoundMs int64
}

// Meta returns the cluster settings (the cached ones while degraded).
func (l *ZKLease) Meta() Meta {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.meta
}

// State returns the current state.
func (l *ZKLease) State() State {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.state
}

// Slot returns the slot held while registered or degraded.
func (l *ZKLease) Slot() (Slot, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.state != StateRegistered && l.state != StateDegraded {
		return Slot{}, false
	}
	return l.slot, true
}

// Status returns a snapshot for metrics: the state, ZooKeeper
// connectivity and the last measured clock offset against ZooKeeper.
func (l *ZKLease) Status() Status {
	v := l.sess.View()
	bound := l.claimBound(true)
	l.mu.Lock()
	defer l.mu.Unlock()
	return Status{
		StateLosses:      l.losses,
		UnreadableMarks:  l.skipped,
		ClusterBoundMs:   bound,
		State:            l.state,
		ZKConnected:      v.Has,
		SessionID:        v.ID,
		Slot:             l.slot,
		HasSlot:          l.hasSlot,
		HighWater:        l.hw,
		LastHeartbeat:    l.beatAt,
		ClockOffset:      l.offset,
		ClockOffsetKnown: l.offsetKnown,
	}
}

// Member returns the path of this node's member znode ("" while it has
// none, e.g. degraded).
func (l *ZKLease) Member() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.member
}

// Close stops the heartbeat and fences the holder, then writes the
// holder's exact last used millisecond as the slot's high-water mark (in
// ZooKeeper if the slot is still this session's, and in the properties
// file), deletes the slot claim and member znodes and closes the client.
// If ctx ends first, the look-ahead mark of the last heartbeat stays, which
// is safe. Close is idempotent.
func (l *ZKLease) Close(ctx context.Context) error {
	l.once.Do(func() { l.err = l.close(ctx) })
	return l.err
}

func (l *ZKLease) close(ctx context.Context) error {
	l.cancel()
	select {
	case <-l.done:
	case <-ctx.Done():
		// A task is stuck in a ZooKeeper call: closing the lease's own
		// client ends it (a shared session's client ends the call with its
		// own timeouts: a guard never closes the node's session).
		if l.ownSess {
			l.sess.Close()
		}
		<-l.done
	}
	// The manager has exited, after fencing the holder: nothing issues IDs
	// now and LastUsed is final.
	l.mu.Lock()
	s, m, hasSlot, sid, member := l.slot, l.meta, l.hasSlot, l.sid, l.member
	l.mu.Unlock()
	var errs []error
	if hasSlot {
		exact := max(l.cfg.Holder.LastUsed(), s.NotBefore)
		v := l.sess.View()
		if v.Has && v.ID == sid && sid != 0 && ctx.Err() == nil {
			if err := l.closeZK(s, sid, member, exact); err != nil {
				errs = append(errs, err)
			}
		}
		if err := l.writePropsExact(s, m, exact, true); err != nil {
			errs = append(errs, err)
		}
		// No "idc" here: l.log carries the configured one (register.go),
		// which is the slot's; twice, the JSON line had the key twice.
		l.log.Info("worker lease closed", zap.Int("node", s.Node),
			zap.Int("worker", s.Worker), zap.Int64("last_used_ms", exact))
	}
	if l.ownSess {
		l.sess.Close()
	}
	l.mu.Lock()
	l.state, l.hasSlot, l.member = StateNone, false, ""
	l.mu.Unlock()
	return errors.Join(errs...)
}

// closeZK writes the exact mark and removes this node's znodes, if the slot
// is still this session's (a slot lost to another node must not have its
// mark lowered).
func (l *ZKLease) closeZK(s Slot, sid int64, member string, exact int64) error {
	c := l.claimer(l.Meta())
	ok, st, err := l.conn.Exists(l.l.slot(s.IDC, s.Node))
	if err != nil {
		return fmt.Errorf("close: check slot: %w", err)
	}
	if !ok || st.EphemeralOwner != sid {
		return nil
	}
	var errs []error
	if _, err := l.writeLast(s, exact, true); err != nil {
		errs = append(errs, fmt.Errorf("close: write exact high-water mark: %w", err))
	}
	if err := c.release(s.Node); err != nil {
		errs = append(errs, fmt.Errorf("close: release slot: %w", err))
	}
	if member != "" {
		if err := l.conn.Delete(member, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			errs = append(errs, fmt.Errorf("close: delete member: %w", err))
		}
	}
	return errors.Join(errs...)
}

// claimer returns a claimer of this node's IDC for the current session.
func (l *ZKLease) claimer(m Meta) claimer {
	return claimer{
		zk: l.conn, l: l.l, idc: l.cfg.IDC, nodeBits: m.NodeBits, acl: l.acl, unreadable: l.skipMark,
		data: func() []byte {
			return toJSON(slotData{
				Host: l.cfg.Host, Port: l.cfg.Port, PID: l.pid,
				Session: sessionHex(l.conn.SessionID()), ClaimedAt: rfc3339(l.cfg.Clock.Now().UnixMilli()),
			})
		},
	}
}

// skipMark logs and counts a slot skipped for an unreadable mark.
func (l *ZKLease) skipMark(node int, err error) {
	l.mu.Lock()
	l.skipped++
	l.mu.Unlock()
	l.log.Error("worker slot skipped: its high-water mark cannot be read; repair or delete the znode (idctl workers shows the slot)",
		zap.Int("node", node), zap.Error(err))
}

// readClaimed reads the mark of a claimed slot. When it cannot be decoded,
// the claim is released, the slot skipped and the least recently used
// other free slot claimed instead.
func (l *ZKLease) readClaimed(ctx context.Context, c claimer, node int) (int, lastRead, error) {
	for range 3 {
		last, err := c.readLast(ctx, node)
		if !errors.Is(err, errUnreadableMark) {
			return node, last, err
		}
		_ = c.release(node)
		l.skipMark(node, err)
		if node, err = c.claimLRU(ctx, node, l.claimBound(false)); err != nil {
			return 0, lastRead{}, err
		}
	}
	return 0, lastRead{}, fmt.Errorf("%w: three slots in a row had unreadable marks", errUnreadableMark)
}

// nextMark returns the high-water mark a heartbeat writes now: Lead ahead
// (the interval until the next write, the outage it must ride out and a
// margin), and never below a mark already written or the slot's NotBefore
// (a backward clock step must not lower the recorded mark).
func (l *ZKLease) nextMark(notBefore int64) int64 {
	ahead := l.cfg.Clock.Now().Add(l.cfg.Lead()).UnixMilli()
	l.mu.Lock()
	defer l.mu.Unlock()
	hw := max(ahead, l.hw, notBefore+1)
	if l.ceiling > 0 {
		hw = min(hw, l.ceiling) // degraded: not past the old claim's expiry
	}
	return hw
}

// raiseMark records that mark hw was written.
func (l *ZKLease) raiseMark(hw int64) {
	l.mu.Lock()
	l.hw = max(l.hw, hw)
	l.mu.Unlock()
}

// setLastVersion records the version of last/<node> the next write is
// conditional on (exists false: the next write creates it).
func (l *ZKLease) setLastVersion(r lastRead) {
	l.mu.Lock()
	l.lastVer, l.lastExists = r.version, r.exists
	l.mu.Unlock()
}

// writeLast writes hw to last/<node>, conditional on the version this lease
// last saw (rule 1): a write queued under an expired session that lands
// after the slot's next holder wrote its mark fails instead of lowering
// that mark. A conflict is ErrSlotTaken, unless the znode holds this
// lease's own write (a reply lost on a dropped connection), which is
// adopted and the write retried once, or ZooKeeper lost this lease's
// writes (see reconcile).
func (l *ZKLease) writeLast(s Slot, hw int64, exact bool) (*zk.Stat, error) {
	path := l.l.last(s.IDC, s.Node)
	data := toJSON(lastData{
		HighWater: hw, HighWaterAt: rfc3339(hw), Exact: exact,
		WrittenAtMs: l.cfg.Clock.Now().UnixMilli(),
		Host:        l.cfg.Host, Port: l.cfg.Port, PID: l.pid, Session: sessionHex(l.conn.SessionID()), Token: l.token,
	})
	for attempt := 0; ; attempt++ {
		l.mu.Lock()
		ver, exists := l.lastVer, l.lastExists
		l.mu.Unlock()
		sent := l.cfg.Clock.Now().UnixMilli()
		var st *zk.Stat
		var err error
		if exists {
			st, err = l.conn.Set(path, data, ver)
		} else if _, err = l.conn.Create(path, data, 0, l.acl); err == nil {
			_, st, err = l.conn.Exists(path)
		}
		if err == nil && st != nil {
			l.setLastVersion(lastRead{exists: true, version: st.Version})
			l.mu.Lock()
			l.zkContact = max(l.zkContact, sent)
			l.mu.Unlock()
			l.afterWrite(st.Mzxid, st.Mtime)
			return st, nil
		}
		conflict := errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNodeExists) || (exists && errors.Is(err, zk.ErrNoNode))
		if !conflict {
			return nil, fmt.Errorf("write %s: %w", path, err)
		}
		if attempt == 0 {
			ok, rerr := l.reconcile(s, path, ver, exists)
			if rerr != nil {
				return nil, rerr
			}
			if ok {
				continue
			}
		}
		return nil, fmt.Errorf("%w: %s changed since this node's last mark (%v): another holder took the slot, or ZooKeeper lost it",
			ErrSlotTaken, path, err)
	}
}

// reconcile explains a failed conditional mark write (ok: write again).
//   - The znode holds this lease's own latest write: its reply was lost on
//     a dropped connection; adopt its version.
//   - The znode went back (this lease's token with a lower mark or an
//     older version) or vanished although this lease had written it:
//     nobody lowers or deletes a mark, so ZooKeeper lost acknowledged
//     writes (wiped, or restored from an older copy). Marks of other slots
//     may be stale too: the cluster is marked restored (every slot taken
//     in the next lead waits past it). The slot is still this lease's if
//     its claim is this session's: its history is this process's own, so
//     the mark is written again on the znode found.
//   - Anything else: another holder wrote it (ok false: ErrSlotTaken).
func (l *ZKLease) reconcile(s Slot, path string, ver int32, exists bool) (bool, error) {
	b, st, err := l.conn.Get(path)
	switch {
	case errors.Is(err, zk.ErrNoNode):
		if !exists {
			return false, nil
		}
		return l.lostOwnMark(s, fmt.Sprintf("%s, written by this node, is gone", path), lastRead{})
	case err != nil:
		return false, nil
	}
	d, derr := decodeLast(b)
	if derr != nil || d.Token == "" || d.Token != l.token {
		return false, nil
	}
	l.mu.Lock()
	hw := l.hw
	l.mu.Unlock()
	if st.Version < ver || (st.Version == ver && d.HighWater < hw) {
		return l.lostOwnMark(s, fmt.Sprintf("%s went back from version %d to %d (mark %d, this node wrote up to %d)", path, ver, st.Version, d.HighWater, hw),
			lastRead{lastData: d, exists: true, version: st.Version})
	}
	l.setLastVersion(lastRead{exists: true, version: st.Version})
	return true, nil
}

// lostOwnMark handles a mark of this lease that ZooKeeper lost: the
// cluster is marked restored, and the write goes on on the znode found
// (found) when the slot's claim is still this session's.
func (l *ZKLease) lostOwnMark(s Slot, what string, found lastRead) (bool, error) {
	if err := l.stateLost("this node's own high-water mark " + what); err != nil {
		return false, fmt.Errorf("ZooKeeper lost this node's mark (%s); marking the cluster restored failed: %w", what, err)
	}
	ok, st, err := l.conn.Exists(l.l.slot(s.IDC, s.Node))
	if err != nil || !ok || st.EphemeralOwner != l.conn.SessionID() {
		return false, nil
	}
	l.setLastVersion(found)
	return true, nil
}

// RequestExtend asks the lease to write the next high-water mark now
// instead of at the next heartbeat (the holder's clock is near or past the
// mark). It does not block; requests coalesce.
func (l *ZKLease) RequestExtend() {
	select {
	case l.extend <- struct{}{}:
	default:
	}
}

// writeProps caches the slot and its look-ahead mark in the properties file.
func (l *ZKLease) writeProps(s Slot, m Meta, hw int64) error {
	return l.writePropsExact(s, m, hw, false)
}

// writePropsExact caches the slot and mark; exact marks a clean shutdown's
// exact last-used millisecond.
func (l *ZKLease) writePropsExact(s Slot, m Meta, hw int64, exact bool) error {
	l.mu.Lock()
	contact := l.zkContact
	l.mu.Unlock()
	err := writeProperties(l.props, properties{
		Cluster: l.cfg.Cluster, IDC: s.IDC, Node: s.Node, WorkerID: s.Worker, HighWater: hw, Exact: exact, Meta: m,
		ZKContactMs: contact,
	})
	if err != nil {
		return fmt.Errorf("properties file %s: %w", l.props, err)
	}
	return nil
}

// readCache reads the properties file, or another one of this app and
// cluster in the same directory when the host's address changed; nothing
// found is not an error.
func (l *ZKLease) readCache() (properties, bool, error) {
	p, used, found, err := readAnyProperties(l.props, l.cfg.App, l.cfg.Cluster, l.cfg.IDC)
	if err != nil {
		return properties{}, false, err
	}
	if found && used != l.props {
		l.log.Info("properties file of another address found: using its cached slot and mark",
			zap.String("found", used), zap.String("expected", l.props))
	}
	return p, found, nil
}
