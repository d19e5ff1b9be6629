package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"
)

// ZKLease is a worker slot claimed in ZooKeeper (see Register). Its
// methods are safe for concurrent use.
type ZKLease struct {
	cfg     Config
	log     *zap.Logger
	l       layout
	acl     []zk.ACL
	conn    ZK      // the swappable client below (see redial.go)
	zk      *swapZK // the same, for replacing the client
	sess    *sessionWatch
	props   string // properties file path
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
	authOK       bool // digest credential added to the client
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
	lastVer     int32
	lastExists  bool
	token       string // identifies this lease's writes in lastData
	metaCtime   int64  // ZooKeeper's creation time of the meta znode (ms)
	metaChanged bool   // ZooKeeper's created_ms differs from the one started with
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
	v, _ := l.sess.view()
	l.mu.Lock()
	defer l.mu.Unlock()
	return Status{
		State:            l.state,
		ZKConnected:      v.has,
		SessionID:        v.id,
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
		// A task is stuck in a ZooKeeper call: closing the client ends it.
		l.conn.Close()
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
		v, _ := l.sess.view()
		if v.has && v.id == sid && sid != 0 && ctx.Err() == nil {
			if err := l.closeZK(s, sid, member, exact); err != nil {
				errs = append(errs, err)
			}
		}
		if err := l.writePropsExact(s, m, exact, true); err != nil {
			errs = append(errs, err)
		}
		l.log.Info("worker lease closed", zap.Int("idc", s.IDC), zap.Int("node", s.Node),
			zap.Int("worker", s.Worker), zap.Int64("last_used_ms", exact))
	}
	l.conn.Close()
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
		zk: l.conn, l: l.l, idc: l.cfg.IDC, nodeBits: m.NodeBits, acl: l.acl,
		data: func() []byte {
			return toJSON(slotData{
				Host: l.cfg.Host, Port: l.cfg.Port, PID: l.pid,
				Session: sessionHex(l.conn.SessionID()), ClaimedAt: rfc3339(l.cfg.Clock.Now().UnixMilli()),
			})
		},
	}
}

// nextMark returns the high-water mark a heartbeat writes now: Lead ahead
// (the interval until the next write, the outage it must ride out and a
// margin), and never below a mark already written or the slot's NotBefore
// (a backward clock step must not lower the recorded mark).
func (l *ZKLease) nextMark(notBefore int64) int64 {
	ahead := l.cfg.Clock.Now().Add(l.cfg.Lead()).UnixMilli()
	l.mu.Lock()
	defer l.mu.Unlock()
	return max(ahead, l.hw, notBefore+1)
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
// adopted and the write retried once.
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
		var st *zk.Stat
		var err error
		if exists {
			st, err = l.conn.Set(path, data, ver)
		} else if _, err = l.conn.Create(path, data, 0, l.acl); err == nil {
			_, st, err = l.conn.Exists(path)
		}
		if err == nil && st != nil {
			l.setLastVersion(lastRead{exists: true, version: st.Version})
			return st, nil
		}
		conflict := errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNodeExists) || (exists && errors.Is(err, zk.ErrNoNode))
		if !conflict {
			return nil, fmt.Errorf("write %s: %w", path, err)
		}
		if attempt == 0 && l.adoptOwnWrite(path) {
			continue
		}
		return nil, fmt.Errorf("%w: %s changed since this node's last mark (%v): another holder took the slot, or ZooKeeper lost it",
			ErrSlotTaken, path, err)
	}
}

// adoptOwnWrite reads last/<node> and, if this lease wrote what is there,
// takes its version as the one to write on.
func (l *ZKLease) adoptOwnWrite(path string) bool {
	b, st, err := l.conn.Get(path)
	if err != nil {
		return false
	}
	d, err := decodeLast(b)
	if err != nil || d.Token == "" || d.Token != l.token {
		return false
	}
	l.setLastVersion(lastRead{exists: true, version: st.Version})
	return true
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
	err := writeProperties(l.props, properties{
		Cluster: l.cfg.Cluster, IDC: s.IDC, Node: s.Node, WorkerID: s.Worker, HighWater: hw, Exact: exact, Meta: m,
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
