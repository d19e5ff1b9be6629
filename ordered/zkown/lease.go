package zkown

import (
	"context"
	"errors"
	"path"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/ordered"
)

// The lease.
//
// A renewal is a SetData of nodes/<id>; sent at t (this node's monotonic
// clock, read before the call), it extends ValidUntil to
// t + Lease - LeaseMargin, but only when its answer arrives before the
// current ValidUntil (and no lapse happened meanwhile). An answer that
// arrives later means the lease ran out before it was renewed: the lease
// is broken (every held shard is lost, Handler.Lost) and the renewal
// only starts a new lease for shards taken from then on.
//
// Why: a node Y takes a shard from this node X when X's znode has not
// changed for Lease since Y first observed its current version (at L, on
// Y's clock), and serves from L + Lease + LeaseMargin on. X's renewals up
// to that version were all sent before L, so they hold X's lease until
// before L + Lease - LeaseMargin. Y's takeover is a Multi that checks X's
// znode version, so any renewal of X that is not ordered before it is
// applied after Y decided, i.e. after L + Lease: its answer comes after
// X's lease ran out, so it revives nothing. A renewal that took long in
// flight (a queued request, a paused process) can therefore never extend
// a lease some other node already counted as over. The margin absorbs the
// rate difference of the two clocks.

// renewTimeout bounds one renewal: a renewal that needs longer than the
// renewal interval is counted as failed.
func (c *Coordinator) renewTimeout() time.Duration {
	return min(c.cfg.Timeout, c.cfg.Lease/3)
}

func (c *Coordinator) nodeData(id string) []byte {
	return mustJSON(nodeRecord{Addr: c.cfg.Self, ID: id, LeaseMs: c.cfg.Lease.Milliseconds(), PID: c.pid, Host: c.cfg.host,
		Version: c.cfg.Version, StartedAtMs: c.started.UnixMilli(), RenewedAtMs: time.Now().UnixMilli(), Closing: c.closing.Load(),
		StoreLease: c.storeLease.Load()})
}

// createNode creates nodes/<id> (ephemeral) for the current id. Its
// creation counts as a renewal sent when the create was sent.
func (c *Coordinator) createNode(ctx context.Context) error {
	c.mu.Lock()
	id, term := c.id, c.term
	c.mu.Unlock()
	p := path.Join(c.nodesDir, id)
	send, sendWall := c.cfg.Clock.Now(), c.cfg.Wall.Now()
	err := c.call(ctx, c.renewTimeout(), func() error {
		_, err := c.conn.Create(p, c.nodeData(id), zk.FlagEphemeral, c.acl)
		if errors.Is(err, zk.ErrNoNode) {
			// The layout is gone (a wiped ensemble): create it again.
			if err := cluster.EnsurePath(c.conn, c.nodesDir, c.acl); err != nil {
				return err
			}
			_, err = c.conn.Create(p, c.nodeData(id), zk.FlagEphemeral, c.acl)
		}
		if errors.Is(err, zk.ErrNodeExists) {
			// An earlier attempt whose answer was lost: ours if it is of
			// this session.
			_, st, gerr := c.conn.Get(p)
			if gerr == nil && st.EphemeralOwner == c.conn.SessionID() {
				return nil
			}
		}
		return err
	})
	reply, replyWall := c.cfg.Clock.Now(), c.cfg.Wall.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		if errors.Is(err, zk.ErrNodeExists) {
			// Someone else's (never, with a random id): take another id.
			c.id = newID(c.cfg.Self)
		}
		return err
	}
	if c.id != id {
		return nil
	}
	c.nodeOK = true
	c.extendLocked(send, sendWall, reply, replyWall, term)
	return nil
}

// renew renews the lease once (or re-creates this node's znode when it is
// gone).
func (c *Coordinator) renew(ctx context.Context) {
	c.mu.Lock()
	id, term, nodeOK := c.id, c.term, c.nodeOK
	c.mu.Unlock()
	if !nodeOK {
		if err := c.createNode(ctx); err != nil {
			c.renewFails.Add(1)
			c.log.Warn("ORDERED lease: re-creating this node's znode failed", zap.String("id", id), zap.Error(err))
		} else {
			c.log.Info("ORDERED lease: this node's znode is back under a new id", zap.String("id", c.ID()))
			wake(c.kick)
		}
		return
	}
	send, sendWall := c.cfg.Clock.Now(), c.cfg.Wall.Now()
	err := c.call(ctx, c.renewTimeout(), func() error {
		st, err := c.conn.Set(path.Join(c.nodesDir, id), c.nodeData(id), -1)
		c.noteStat(st)
		return err
	})
	reply, replyWall := c.cfg.Clock.Now(), c.cfg.Wall.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.id != id {
		return
	}
	c.zkFailing = err != nil
	if err != nil {
		c.renewFails.Add(1)
		if errors.Is(err, zk.ErrNoNode) {
			// The znode is gone (session expired, or deleted): this id
			// can never renew again. Break the lease and continue under a
			// new id (ids never come back, so no other node can mistake
			// the new znode for the old one).
			c.retired[id] = c.validUn
			c.id = newID(c.cfg.Self)
			c.nodeOK = false
			c.breakLocked("this node's znode is gone (ZooKeeper session expired or znode deleted)")
			c.log.Warn("ORDERED lease: this node's znode is gone; leaving the old id", zap.String("old_id", id),
				zap.String("new_id", c.id), zap.Int("shards_held", len(c.held)))
			wake(c.renewKick)
		} else if c.lh == nil || !c.onStore {
			// While the store carries the lease, the store-lease line
			// said it once; a line per renewal would drown the log.
			c.log.Warn("ORDERED lease renewal failed", zap.Error(err), zap.Time("valid_until", c.validUn))
		}
		return
	}
	if c.onStore {
		c.onStore = false
		c.log.Info("ORDERED lease: ZooKeeper renewals are answered again", zap.Time("valid_until", c.validUn))
	}
	c.renewals.Add(1)
	c.extendLocked(send, sendWall, reply, replyWall, term)
}

// extendLocked applies a successful renewal sent at send (sendWall on the
// wall clock) whose answer arrived at reply (replyWall); term is the term
// read before it was sent. c.mu is held.
//
// The lease ran without a gap only if the answer came before its end on
// both clocks: a VM frozen past the lease resumes with a monotonic clock
// that lost the freeze, and its first renewal would otherwise extend a
// lease its peers have already counted out (they took its shards).
func (c *Coordinator) extendLocked(send, sendWall, reply, replyWall time.Time, term uint64) {
	until := send.Add(c.cfg.Lease - c.cfg.LeaseMargin)
	noGap := reply.Before(c.validUn) && (faultLeaseMonotonicOnly() || ordered.WallBefore(replyWall, c.validUnWall))
	switch {
	case noGap && term == c.term && !c.lapsed:
		// The lease ran without a gap.
	case len(c.held) == 0:
		// The lease ran out (or none yet): a new lease starts; takeovers
		// in flight under the old one are void.
		if !c.validUn.IsZero() {
			c.log.Warn("ORDERED lease ran out before its renewal was answered (no shard held); a new lease starts",
				zap.Time("valid_until", c.validUn), zap.Duration("answered_after", reply.Sub(send)),
				zap.Bool("term_changed", term != c.term))
		}
		c.term++
		c.lapsed = false
	default:
		// The lease ran out before this renewal came back: the shards
		// held are lost (the reconcile loop tells the handler). The next
		// renewal, once they are, starts a new lease.
		c.breakLocked("the lease ran out before its renewal was answered")
		return
	}
	if until.After(c.validUn) {
		c.validUn = until
	}
	if w := sendWall.Add(c.cfg.Lease - c.cfg.LeaseMargin); ordered.WallBefore(c.validUnWall, w) {
		c.validUnWall = w
	}
	c.lastSend = send
}

// breakLocked marks the lease broken: the held shards are due for Lost,
// and takeovers in flight are void. c.mu is held.
func (c *Coordinator) breakLocked(why string) {
	c.term++
	if len(c.held) > 0 {
		if !c.lapsed {
			c.lapses.Add(1)
			c.log.Error("ORDERED lease broken: every shard of this node is lost", zap.String("why", why),
				zap.Int("shards", len(c.held)), zap.Time("valid_until", c.validUn))
		}
		c.lapsed = true
		wake(c.kick)
	}
}

// startRenewer runs the renewer until Close.
func (c *Coordinator) startRenewer() {
	c.mu.Lock()
	c.renewing = true
	c.mu.Unlock()
	go c.renewLoop(c.renewDone, c.renewKick, func() {
		c.renew(context.Background())
		c.mu.Lock()
		due := len(c.held) > 0 && !c.cfg.Clock.Now().Before(c.validUn)
		c.mu.Unlock()
		if due {
			wake(c.kick)
		}
	})
}

// renewLoop runs renew every Lease/3 (and whenever kick fires, when not
// nil) until Close stops the renewers, then closes done. The ZooKeeper
// and the store renewals each have their own: a renewal waiting out its
// timeout on one never delays the other.
func (c *Coordinator) renewLoop(done chan struct{}, kick <-chan struct{}, renew func()) {
	defer close(done)
	t := time.NewTicker(c.cfg.Lease / 3)
	defer t.Stop()
	for {
		select {
		case <-c.stopRenew:
			return
		case <-t.C:
		case <-kick:
		}
		renew()
	}
}
