package zkown

import (
	"context"
	"encoding/json"
	"errors"
	"path"
	"sort"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/ordered"
)

// peer is another coordinator's id as this node observed it.
type peer struct {
	id, addr string
	closing  bool  // its record says it is leaving: never a desired owner
	present  bool  // its znode was in the last listing
	mzxid    int64 // the znode's last write observed
	version  int32
	// lastChange is when this node first observed the current state of
	// the znode: its current write (mzxid), or its absence. An id whose
	// znode has not changed for Lease since is stale.
	lastChange time.Time
	// liveSince is the start of the id's current live period (zero while
	// stale).
	liveSince time.Time
	// pid and host are its record's; dead: proven an earlier process of
	// this node that is dead (predecessor.go), stale at once.
	pid  int
	host string
	dead bool
	// storeLease: its record advertises store leases (storelease.go).
	storeLease bool
}

func (p *peer) stale(now time.Time, after time.Duration) bool {
	return p.dead || !p.present || now.Sub(p.lastChange) >= after
}

// backoff delays the next takeover of a shard whose Acquire failed.
type backoff struct {
	fails int
	until time.Time
}

// roundLoop reconciles on every tick (Lease/6), on watch events and on
// the renewer's kicks, until Close.
func (c *Coordinator) roundLoop() {
	defer close(c.roundDone)
	t := time.NewTicker(c.cfg.Lease / 6)
	defer t.Stop()
	for {
		select {
		case <-c.stopRound:
			return
		default:
		}
		c.round(context.Background())
		select {
		case <-c.stopRound:
			return
		case <-t.C:
		case <-c.kick:
		}
	}
}

func (c *Coordinator) stopping() bool {
	select {
	case <-c.stopRound:
		return true
	default:
		return false
	}
}

// round is one reconciliation: drop the shards of a broken lease, read
// the shards (before the nodes: an owner missing from the listing that
// follows was gone when it was taken), poll the nodes, drop the shards
// another node took, then take and hand off shards. Without an answer
// from ZooKeeper nothing changes hands.
func (c *Coordinator) round(ctx context.Context) {
	c.mu.Lock()
	h := c.h
	c.mu.Unlock()
	if h == nil {
		return
	}
	defer c.publish()
	// The summary of the shards taken and handed off, once a lease passed
	// without a change (summary.go).
	c.sum.flush(c.log, c.cfg.Clock.Now(), c.cfg.Lease, false)
	c.dropIfLapsed(h)
	if !c.usable() {
		// ZooKeeper unreachable: nothing changes hands; do not wait for a
		// session here, so the lease check above runs every tick.
		return
	}
	c.createShards(ctx)
	readOK := c.readShards(ctx)
	pollOK := c.pollNodes(ctx)
	c.checkHeld(h)
	if pollOK {
		c.notePeersStoreLease()
	}
	noncesOK := c.pollNonces(ctx)
	if !readOK || !pollOK || c.stopping() {
		return
	}
	c.decide(ctx, h, noncesOK)
}

// notePeersStoreLease records whether every node of the last listing
// advertises store leases: only then may a store renewal extend this
// node's lease (storelease.go).
func (c *Coordinator) notePeersStoreLease() {
	all := true
	for _, p := range c.peers {
		if p.present && !p.storeLease {
			all = false
		}
	}
	c.mu.Lock()
	if all != c.storePeersOK && c.lh != nil {
		if all {
			c.log.Info("ORDERED store leases in use: every node renews and respects them")
		} else {
			c.log.Warn("ORDERED store leases not used for this node's lease: a node of an older version is in the cluster; a ZooKeeper outage stops ORDERED after one lease until it is upgraded")
		}
	}
	c.storePeersOK = all
	c.mu.Unlock()
}

// selfLiveLocked: this node may take shards (its znode exists, its lease
// runs). c.mu is held.
func (c *Coordinator) selfLiveLocked(now time.Time) bool {
	return c.nodeOK && !c.lapsed && !c.closed && now.Before(c.validUn) &&
		(faultLeaseMonotonicOnly() || ordered.WallBefore(c.cfg.Wall.Now(), c.validUnWall))
}

// dropIfLapsed tells the handler every held shard is lost when the lease
// ran out or was broken.
func (c *Coordinator) dropIfLapsed(h ordered.Handler) {
	c.mu.Lock()
	now := c.cfg.Clock.Now()
	if len(c.held) == 0 || (!c.lapsed && now.Before(c.validUn)) {
		c.mu.Unlock()
		return
	}
	if !c.lapsed {
		c.lapses.Add(1)
	}
	c.lapsed = false
	c.term++
	shards := make([]int, 0, len(c.held))
	for s := range c.held {
		shards = append(shards, s)
	}
	clear(c.held)
	validUntil := c.validUn
	c.mu.Unlock()
	sort.Ints(shards)
	c.log.Error("ORDERED lease ran out: this node's shards are lost", zap.Ints("shards", shards),
		zap.Time("valid_until", validUntil), zap.Time("now", now))
	for _, s := range shards {
		c.lost.Add(1)
		h.Lost(s)
	}
}

// checkHeld tells the handler at once about held shards whose znode says
// they are no longer this node's (another node took them: this node's
// pause outlasted its lease).
func (c *Coordinator) checkHeld(h ordered.Handler) {
	c.mu.Lock()
	var lost []int
	var recs []shardRecord
	for s, e := range c.held {
		v := c.view[s]
		if v.ok && (v.rec.Owner != c.id || v.rec.State != StateOwned || v.rec.Epoch != e) {
			lost = append(lost, s)
			recs = append(recs, v.rec)
			delete(c.held, s)
		}
	}
	c.mu.Unlock()
	for i, s := range lost {
		c.lost.Add(1)
		h.Lost(s)
		c.log.Warn("ORDERED shard taken by another node; dropped", zap.Int("shard", s),
			zap.String("owner", recs[i].Owner), zap.Int64("epoch", recs[i].Epoch))
	}
}

// fired reports whether a watch channel delivered (or was closed).
func fired(ch <-chan zk.Event) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// watchKick wakes the loop when ch fires (s < 0: the nodes directory).
func (c *Coordinator) watchKick(s int, ch <-chan zk.Event) {
	go func() {
		select {
		case <-ch:
			if s >= 0 {
				c.dirty[s].Store(true)
			}
			wake(c.kick)
		case <-c.stopAll:
		}
	}()
}

// readShards reads the shards whose watch fired (or that have none), and
// all of them every Lease. false: ZooKeeper did not answer.
func (c *Coordinator) readShards(ctx context.Context) bool {
	now := c.cfg.Clock.Now()
	full := c.lastFull.IsZero() || now.Sub(c.lastFull) >= c.cfg.Lease
	for s := range Shards {
		arm := c.shardWatch[s] == nil || fired(c.shardWatch[s])
		dirty := c.dirty[s].Swap(false)
		c.mu.Lock()
		ok := c.view[s].ok
		c.mu.Unlock()
		if !full && !arm && !dirty && ok {
			continue
		}
		if arm {
			c.shardWatch[s] = nil
		}
		if err := c.readShard(ctx, s, arm); err != nil {
			c.dirty[s].Store(true)
			c.log.Debug("ORDERED coordinator: reading a shard failed", zap.Int("shard", s), zap.Error(err))
			return false
		}
	}
	if full {
		c.lastFull = now
	}
	return true
}

// newShardData is the content of a shard znode created on demand:
// released, epoch 0.
func newShardData() []byte {
	return mustJSON(shardRecord{State: StateReleased, UpdatedAtMs: time.Now().UnixMilli()})
}

// createShards creates the missing shard znodes in one request, until this
// node's first full read of the shards succeeded.
//
// Why: a new cluster's first node found none, and readShard created each
// with a read, a create and a read again, one shard after another: three
// ZooKeeper round trips a shard with a durable write among them, 90-120 ms
// before its first claim and most of the time from its first SNOWFLAKE ID
// to its first ORDERED ID (issue 31). One Multi is one round trip and one
// durable write. The reads stay one after another: the node's one
// ZooKeeper session answers its requests in order, and a burst of them
// would queue the start's barrier round (which SNOWFLAKE waits for) behind
// ORDERED's.
//
// Safe: it creates exactly what readShard creates (released, epoch 0), and
// only where no znode is; a Multi is all or nothing, so one that fails
// (another node created some of them first, ZooKeeper did not answer, the
// layout is gone) creates nothing, and readShard creates what is still
// missing, as before.
func (c *Coordinator) createShards(ctx context.Context) {
	if !c.lastFull.IsZero() {
		return
	}
	var kids []string
	if err := c.call(ctx, c.cfg.Timeout, func() error {
		var err error
		kids, _, err = c.conn.Children(c.shardsDir)
		return err
	}); err != nil {
		return
	}
	have := make(map[string]bool, len(kids))
	for _, k := range kids {
		have[k] = true
	}
	var ops []any
	for s := range Shards {
		if p := shardPath(c.shardsDir, s); !have[path.Base(p)] {
			ops = append(ops, &zk.CreateRequest{Path: p, Data: newShardData(), Acl: c.acl})
		}
	}
	if len(ops) == 0 {
		return
	}
	err := c.call(ctx, c.cfg.Timeout, func() error {
		res, err := c.conn.Multi(ops...)
		return multiErr(res, err)
	})
	if err != nil {
		c.log.Debug("ORDERED coordinator: creating the missing shard znodes in one request failed; they are created one by one", zap.Int("missing", len(ops)), zap.Error(err))
	}
}

// readShard reads shards/NN into the view, creating it (released, epoch
// 0) when missing; arm sets a data watch.
func (c *Coordinator) readShard(ctx context.Context, s int, arm bool) error {
	p := shardPath(c.shardsDir, s)
	var data []byte
	var st *zk.Stat
	var ch <-chan zk.Event
	err := c.call(ctx, c.cfg.Timeout, func() error {
		for range 3 {
			var err error
			if arm {
				data, st, ch, err = c.conn.GetW(p)
			} else {
				data, st, err = c.conn.Get(p)
			}
			if !errors.Is(err, zk.ErrNoNode) {
				return err
			}
			_, err = c.conn.Create(p, newShardData(), 0, c.acl)
			if errors.Is(err, zk.ErrNoNode) {
				// The layout is gone (a wiped ensemble): create it again.
				if err := cluster.EnsurePath(c.conn, c.shardsDir, c.acl); err != nil {
					return err
				}
				continue
			}
			if err != nil && !errors.Is(err, zk.ErrNodeExists) {
				return err
			}
		}
		return errors.New("zkown: shard znode keeps vanishing")
	})
	if err != nil {
		return err
	}
	if ch != nil {
		c.shardWatch[s] = ch
		c.watchKick(s, ch)
	}
	c.noteStat(st)
	var rec shardRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		c.mu.Lock()
		c.view[s] = shardView{}
		c.mu.Unlock()
		c.log.Error("ORDERED shard znode is not a shard record; the shard is left alone", zap.String("path", p),
			zap.ByteString("data", data), zap.Error(err))
		return nil
	}
	c.mu.Lock()
	c.view[s] = shardView{ok: true, rec: rec, version: st.Version}
	c.mu.Unlock()
	return nil
}

// pollNodes lists nodes/ and reads every other id's znode, recording when
// each was seen to change (or go). false: ZooKeeper did not answer.
func (c *Coordinator) pollNodes(ctx context.Context) bool {
	arm := c.nodesWatch == nil || fired(c.nodesWatch)
	var kids []string
	var ch <-chan zk.Event
	err := c.call(ctx, c.cfg.Timeout, func() error {
		var err error
		if arm {
			kids, _, ch, err = c.conn.ChildrenW(c.nodesDir)
		} else {
			kids, _, err = c.conn.Children(c.nodesDir)
		}
		return err
	})
	listed := c.cfg.Clock.Now()
	if err != nil {
		c.log.Debug("ORDERED coordinator: listing the nodes failed", zap.Error(err))
		return false
	}
	if arm {
		c.nodesWatch = nil
	}
	if ch != nil {
		c.nodesWatch = ch
		c.watchKick(-1, ch)
	}
	c.mu.Lock()
	self := c.id
	retired := make(map[string]bool, len(c.retired))
	for id := range c.retired {
		retired[id] = true
	}
	c.mu.Unlock()

	present := make(map[string]bool, len(kids))
	for _, k := range kids {
		if k == self || retired[k] {
			continue
		}
		var data []byte
		var st *zk.Stat
		err := c.call(ctx, c.cfg.Timeout, func() error {
			var err error
			data, st, err = c.conn.Get(path.Join(c.nodesDir, k))
			return err
		})
		seen := c.cfg.Clock.Now()
		p := c.peers[k]
		if errors.Is(err, zk.ErrNoNode) {
			// Gone since the listing: it may have written after the
			// listing, so its absence dates from now.
			if p == nil {
				p = &peer{id: k}
				c.peers[k] = p
			}
			if p.present || p.lastChange.IsZero() {
				p.present, p.lastChange, p.liveSince = false, seen, time.Time{}
			}
			present[k] = true // handled
			continue
		}
		if err != nil {
			c.log.Debug("ORDERED coordinator: reading a node failed", zap.String("id", k), zap.Error(err))
			return false
		}
		c.noteStat(st)
		present[k] = true
		if p == nil {
			p = &peer{id: k}
			c.peers[k] = p
		}
		if !p.present || p.mzxid != st.Mzxid {
			p.present, p.mzxid, p.version, p.lastChange = true, st.Mzxid, st.Version, seen
			var rec nodeRecord
			if err := json.Unmarshal(data, &rec); err == nil {
				p.addr, p.closing, p.pid, p.host, p.storeLease = rec.Addr, rec.Closing, rec.PID, rec.Host, rec.StoreLease
			} else {
				c.log.Warn("ORDERED coordinator: a node's znode is not a node record", zap.String("id", k), zap.Error(err))
			}
		}
		if !p.dead && c.predecessorDead(p) {
			c.log.Info("ORDERED coordinator: this node's previous process is dead (same address, boot and pid namespace, its pid gone): its shards are taken without a lease wait",
				zap.String("old_id", k), zap.Int("old_pid", p.pid))
		}
	}
	for id, p := range c.peers {
		if !present[id] && (p.present || p.lastChange.IsZero()) {
			// Not in the listing: gone before it was answered.
			p.present, p.lastChange, p.liveSince = false, listed, time.Time{}
		}
	}
	// Owners this node never saw: gone before the listing (the shards
	// were read before it).
	c.mu.Lock()
	referenced := make(map[string]bool)
	for s := range Shards {
		r := c.view[s].rec
		if _, mine := c.retired[r.Owner]; !c.view[s].ok || !r.owned() || r.Owner == c.id || mine {
			continue
		}
		referenced[r.Owner] = true
		if c.peers[r.Owner] == nil {
			c.peers[r.Owner] = &peer{id: r.Owner, addr: r.Addr, lastChange: listed}
		}
	}
	c.mu.Unlock()
	for id, p := range c.peers {
		if !p.present && !referenced[id] && listed.Sub(p.lastChange) > 10*c.cfg.Lease {
			delete(c.peers, id)
			delete(c.warned, id)
		}
	}
	return true
}

// decide takes the shards this node should own and hands off those it
// should not. noncesOK: this round read the store's lease nonces (needed
// for a takeover under the store's rules, storeTakerRules).
func (c *Coordinator) decide(ctx context.Context, h ordered.Handler, noncesOK bool) {
	now := c.cfg.Clock.Now()
	// Liveness of the other nodes, and the live addresses.
	since := map[string]time.Time{} // addr -> earliest liveSince
	for _, p := range c.peers {
		if p.stale(now, c.staleAfter) {
			p.liveSince = time.Time{}
			continue
		}
		if p.liveSince.IsZero() {
			p.liveSince = p.lastChange
		}
		if p.addr == "" || p.closing {
			continue
		}
		if p.addr == c.cfg.Self && !c.warned[p.id] {
			c.warned[p.id] = true
			c.log.Warn("ORDERED coordinator: another live node advertises this node's address (a previous process of this node, or two nodes configured with the same address)",
				zap.String("other_id", p.id))
		}
		if t, ok := since[p.addr]; !ok || p.liveSince.Before(t) {
			since[p.addr] = p.liveSince
		}
	}
	c.mu.Lock()
	selfLive := c.selfLiveLocked(now)
	id := c.id
	retired := make(map[string]time.Time, len(c.retired))
	for k, v := range c.retired {
		retired[k] = v
	}
	views := c.view
	held := make(map[int]bool, len(c.held))
	for s := range c.held {
		held[s] = true
	}
	c.mu.Unlock()
	addrs := make([]string, 0, len(since)+1)
	for a := range since {
		if a != c.cfg.Self {
			addrs = append(addrs, a)
		}
	}
	if selfLive {
		addrs = append(addrs, c.cfg.Self)
	}
	sort.Strings(addrs)
	c.mu.Lock()
	c.live = len(addrs)
	c.mu.Unlock()
	if !selfLive {
		return
	}
	handoffs := 0
	// Takeovers run after the pass, several at once (parallel.go);
	// hand-offs run in the pass, one after another, as before.
	var takes []func() claim
	defer func() { c.runTakeovers(ctx, takes) }()
	// take queues a takeover of shard s (from owner), under the store's
	// lease rules unless its owner is a process proven dead.
	take := func(s int, owner string, dead bool, run func(lc leaseCheck) claim) {
		var lc leaseCheck
		if c.storeTakerRules() && !dead {
			if !noncesOK {
				return
			}
			ready, nb, observed := c.storeWait(s, now)
			if !ready {
				c.noteStoreHeld(s, owner)
				return
			}
			lc = leaseCheck{on: true, observed: observed, notBefore: nb}
		}
		takes = append(takes, func() claim { return run(lc) })
	}
	for s := range Shards {
		if c.stopping() {
			return
		}
		v := views[s]
		if !v.ok {
			continue
		}
		want := DesiredOwner(addrs, s)
		mine := want == c.cfg.Self
		r := v.rec
		switch {
		case held[s]:
			// Not before the lease wait of the takeover is over: the
			// next owner will serve at once.
			if !mine && handoffs < c.cfg.MaxHandoffs && now.Sub(since[want]) >= c.cfg.Lease && !now.Before(c.wait[s]) {
				handoffs++
				c.log.Debug("ORDERED shard handed off to its desired owner", zap.Int("shard", s), zap.String("to", want))
				_ = c.handoff(ctx, h, s)
				if !c.holds(s) { // not deferred by the handler
					c.sum.handedOff(s, want, c.cfg.Clock.Now())
				}
			}
		case r.owned() && r.Owner == id:
			// Ours in ZooKeeper but not held (the lease broke, a
			// release or an acquisition did not complete): the handler
			// does not serve it.
			if mine {
				take(s, r.Owner, false, func(lc leaseCheck) claim { return c.takeover(ctx, h, s, v, now, nil, "reacquire", lc) })
			} else {
				c.releaseIfWaited(ctx, s, v)
			}
		case !r.owned():
			if mine {
				// A release that carries a wait (written after the store
				// showed ZooKeeper had lost the shard's history) is taken
				// one lease from now: the owner before the loss may still
				// answer until then. "Now" is read here, after the record
				// was read, not at the start of the pass: the release may
				// have been written after the pass began (by this node's
				// own refused takeover), and the wait counts from it.
				take(s, r.Owner, false, func(lc leaseCheck) claim {
					return c.takeover(ctx, h, s, v, c.cfg.Clock.Now().Add(time.Duration(r.WaitMs)*time.Millisecond), nil, "released", lc)
				})
			}
		case isRetired(retired, r.Owner):
			// An earlier id of this node: its lease ended at the
			// recorded time and the handler was told.
			if mine {
				nb := laterOf(now, retired[r.Owner])
				take(s, r.Owner, false, func(lc leaseCheck) claim {
					return c.takeover(ctx, h, s, v, nb, nil, "this node's earlier id", lc)
				})
			}
		default:
			p := c.peers[r.Owner]
			if !mine || p == nil || !p.stale(now, c.staleAfter) {
				continue // a live owner hands off by itself
			}
			var check *zk.CheckVersionRequest
			if p.present {
				// Not renewed for Lease: the takeover holds only if it
				// still has not been (a renewal ordered after it cannot
				// extend that owner's lease: see renew).
				check = &zk.CheckVersionRequest{Path: path.Join(c.nodesDir, r.Owner), Version: p.version}
			}
			nb, why := p.lastChange.Add(c.cfg.Lease+c.cfg.LeaseMargin), "stale owner "+r.Owner
			if p.dead {
				nb, why = now, "dead previous process "+r.Owner
			}
			take(s, r.Owner, p.dead, func(lc leaseCheck) claim { return c.takeover(ctx, h, s, v, nb, check, why, lc) })
		}
	}
}

func isRetired(m map[string]time.Time, id string) bool {
	_, ok := m[id]
	return ok
}

func laterOf(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// leaseCheck is what the store's lease adds to a takeover
// (storelease.go): on, the claim must still find the nonce observed, and
// the grant serves from notBefore at the earliest.
type leaseCheck struct {
	on        bool
	observed  string
	notBefore time.Time
}

// takeover makes this node the shard's owner at the next epoch (a
// compare-and-set on the version read, with check when given) and
// grants it to the handler from notBefore on (and lc.notBefore, with the
// store's nonce check when lc.on). It returns what became of it, for the
// round's summary (runTakeovers).
func (c *Coordinator) takeover(ctx context.Context, h ordered.Handler, s int, v shardView, notBefore time.Time,
	check *zk.CheckVersionRequest, why string, lc leaseCheck) claim {
	now := c.cfg.Clock.Now()
	if now.Before(c.backoff[s].until) {
		return claim{}
	}
	if c.cfg.UnsafeNoLeaseWait {
		notBefore = now
	} else {
		notBefore = laterOf(laterOf(laterOf(notBefore, lc.notBefore), c.wait[s]), c.restoreWait())
	}
	notBefore = laterOf(now, notBefore)
	c.mu.Lock()
	if !c.selfLiveLocked(now) {
		c.mu.Unlock()
		return claim{}
	}
	term, id := c.term, c.id
	c.mu.Unlock()
	rec := shardRecord{Owner: id, Addr: c.cfg.Self, Epoch: v.rec.Epoch + 1, State: StateOwned, UpdatedAtMs: time.Now().UnixMilli()}
	p := shardPath(c.shardsDir, s)
	var st *zk.Stat
	err := c.call(ctx, c.cfg.Timeout, func() error {
		set := &zk.SetDataRequest{Path: p, Data: mustJSON(rec), Version: v.version}
		if check == nil {
			var err error
			st, err = c.conn.Set(set.Path, set.Data, set.Version)
			return err
		}
		res, err := c.conn.Multi(check, set)
		if err := multiErr(res, err); err != nil {
			return err
		}
		if len(res) == 2 {
			st = res[1].Stat
		}
		return nil
	})
	if err != nil {
		c.dirty[s].Store(true)
		if conflict(err) {
			c.conflicts.Add(1)
			c.log.Info("ORDERED shard takeover lost its compare-and-set (changed since read)", zap.Int("shard", s),
				zap.String("why", why), zap.Error(err))
			return claim{}
		}
		c.log.Warn("ORDERED shard takeover failed", zap.Int("shard", s), zap.String("why", why), zap.Error(err))
		return claim{shard: s, why: why, failed: true}
	}
	if st == nil {
		c.dirty[s].Store(true)
	}
	c.wait[s] = notBefore
	now2 := c.cfg.Clock.Now()
	c.mu.Lock()
	if st != nil {
		c.view[s] = shardView{ok: true, rec: rec, version: st.Version}
	}
	ok := term == c.term && c.selfLiveLocked(now2)
	if ok {
		c.held[s] = rec.Epoch
	}
	closing, termChanged, validUntil := c.closed, term != c.term, c.validUn
	c.mu.Unlock()
	switch {
	case !ok && closing:
		c.log.Info("ORDERED coordinator closing: a takeover in flight is not served", zap.Int("shard", s))
		return claim{}
	case !ok:
		c.log.Warn("ORDERED lease broke during a takeover; the shard is taken again once the lease runs",
			zap.Int("shard", s), zap.Int64("epoch", rec.Epoch), zap.Bool("term_changed", termChanged),
			zap.Time("valid_until", validUntil), zap.Time("now", now2))
		return claim{shard: s, why: why, failed: true}
	}
	c.takeovers.Add(1)
	g := ordered.Grant{Shard: s, Epoch: rec.Epoch, NotBefore: notBefore,
		NotBeforeWall: c.cfg.Wall.Now().Add(notBefore.Sub(c.cfg.Clock.Now())), CheckLease: lc.on, Observed: lc.observed}
	if v.rec.owned() {
		g.From = v.rec.Addr
	}
	c.log.Debug("ORDERED shard taken", zap.Int("shard", s), zap.Int64("epoch", rec.Epoch), zap.String("from", v.rec.Owner),
		zap.String("why", why), zap.Duration("lease_wait", notBefore.Sub(now)))
	actx, cancel := context.WithTimeout(ctx, c.cfg.HandlerTimeout)
	c.beginAcquire()
	err = h.Acquire(actx, g)
	c.endAcquire()
	cancel()
	if err == nil {
		c.backoff[s] = backoff{}
		return claim{shard: s, why: why, taken: true, leaseWait: notBefore.Sub(now)}
	}
	// Give the shard up (the handler does not serve it) and try later.
	c.acquireFails.Add(1)
	c.mu.Lock()
	delete(c.held, s)
	v = c.view[s]
	var fe *ordered.FencedError
	if errors.As(err, &fe) {
		// The store holds an epoch at or above the grant's that ZooKeeper
		// did not hand to this node (a wiped or restored ensemble): the
		// release carries it, so the next takeover claims above it, and a
		// lease wait, because that epoch's owner may still answer from
		// memory. Equal epochs count too: two grants of one epoch.
		c.epochFloor[s] = max(c.epochFloor[s], fe.Stored)
		c.storeAhead[s] = true
	}
	c.mu.Unlock()
	h.Lost(s)
	b := &c.backoff[s]
	b.fails++
	wait := c.cfg.Lease / 3 << min(b.fails-1, 5)
	if errors.Is(err, ordered.ErrShardBusy) || errors.Is(err, ordered.ErrLeaseRenewed) {
		// A paused owner's transaction holds the shard's fence row; the
		// store's session limit ends it within seconds. Growing the
		// backoff to half a minute would keep the shard down far longer
		// than the pause. An owner that renewed through the store since
		// its nonce was observed is alive: the next rounds see its
		// nonce move and wait for it by themselves.
		wait = c.cfg.Lease / 3
	}
	b.until = c.cfg.Clock.Now().Add(wait)
	c.log.Warn("ORDERED shard acquisition failed; giving the shard up", zap.Int("shard", s), zap.Int64("epoch", rec.Epoch),
		zap.Duration("retry_in", wait), zap.Error(err))
	if fe != nil {
		// Released at once, with the store's epoch as the floor and a
		// lease wait counted from now, whatever wait was pending: kept
		// as this node's, the shard would be taken again by the
		// "reacquire" path at the pending wait (a restore's, counted from
		// its detection, which can end sooner than a lease after this
		// refusal) and at an epoch that ignores the floor
		// (TestWipeStoreEpochsWaitedOut failed 1 run in about 30).
		c.releaseZnode(ctx, s, v)
		return claim{shard: s, why: why, failed: true}
	}
	c.releaseIfWaited(ctx, s, v)
	return claim{shard: s, why: why, failed: true}
}

// releaseIfWaited releases a shard this node owns in ZooKeeper but does
// not serve, once its lease wait is over (before, the znode stays this
// node's: released, the next owner would serve at once).
func (c *Coordinator) releaseIfWaited(ctx context.Context, s int, v shardView) {
	if c.cfg.Clock.Now().Before(c.wait[s]) {
		return
	}
	c.releaseZnode(ctx, s, v)
}

// handoff is a planned hand-off of a held shard: Handler.Release (the
// handler stops answering and writes back), then the znode is released at
// the same epoch.
func (c *Coordinator) handoff(ctx context.Context, h ordered.Handler, s int) error {
	c.mu.Lock()
	epoch, ok := c.held[s]
	c.mu.Unlock()
	if !ok {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, c.cfg.HandlerTimeout)
	err := h.Release(rctx, s)
	cancel()
	leaving := ordered.IsLeaving(ctx)
	switch {
	case errors.Is(err, ordered.ErrHandOffDeferred) && !leaving:
		// The handler still serves the shard (its barrier's gate is
		// closed, a write-back would be refused): keep it, try later.
		c.log.Debug("ORDERED hand-off deferred by the handler; the shard stays this node's for now",
			zap.Int("shard", s), zap.Int64("epoch", epoch), zap.Error(err))
		return nil
	case errors.Is(err, ordered.ErrHandOffDeferred):
		// Leaving, and the gate stayed closed until the deadline: stop
		// serving without a write-back (Lost), and release with a wait.
		c.log.Warn("ORDERED hand-off while leaving: the handler's gate stayed closed; the shard is dropped and released with a lease wait",
			zap.Int("shard", s), zap.Int64("epoch", epoch), zap.Error(err))
		h.Lost(s)
		c.markUnclean(s)
	case errors.Is(err, ordered.ErrUncleanHandOff):
		c.log.Warn("ORDERED hand-off without the exact write-back; the shard is released with a lease wait",
			zap.Int("shard", s), zap.Int64("epoch", epoch), zap.Error(err))
		c.markUnclean(s)
	case err != nil:
		c.log.Warn("ORDERED hand-off: the handler's release failed (its reservations stay a gap); releasing anyway",
			zap.Int("shard", s), zap.Int64("epoch", epoch), zap.Error(err))
	}
	c.mu.Lock()
	delete(c.held, s)
	v := c.view[s]
	c.mu.Unlock()
	c.handoffs.Add(1)
	if c.cfg.Clock.Now().Before(c.wait[s]) {
		c.log.Warn("ORDERED hand-off before the shard's lease wait ended: the znode stays this node's and the next owner waits",
			zap.Int("shard", s), zap.Time("wait_until", c.wait[s]))
		return err
	}
	c.releaseZnode(ctx, s, v)
	return err
}

// holds reports whether this node holds shard s.
func (c *Coordinator) holds(s int) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.held[s]
	return ok
}

// markUnclean makes the shard's next release carry a lease wait: a
// hand-off whose exact write-back did not happen (ordered.ErrUncleanHandOff)
// may leave the store below what this node handed out after a lossy MySQL
// failover, so the next owner must not serve at once.
func (c *Coordinator) markUnclean(s int) {
	c.mu.Lock()
	c.storeAhead[s] = true
	c.mu.Unlock()
}

// releaseZnode writes shards/NN released (same epoch) when it is still
// this node's, compare-and-set on the version.
func (c *Coordinator) releaseZnode(ctx context.Context, s int, v shardView) {
	c.mu.Lock()
	id := c.id
	c.mu.Unlock()
	p := shardPath(c.shardsDir, s)
	for attempt := 0; attempt < 2; attempt++ {
		if !v.ok || !v.rec.owned() || v.rec.Owner != id {
			return
		}
		c.mu.Lock()
		floor, ahead := c.epochFloor[s], c.storeAhead[s]
		c.mu.Unlock()
		rec := shardRecord{Epoch: max(v.rec.Epoch, floor), State: StateReleased, UpdatedAtMs: time.Now().UnixMilli()}
		if floor > v.rec.Epoch || ahead {
			rec.WaitMs = (c.cfg.Lease + c.cfg.LeaseMargin).Milliseconds()
		}
		var st *zk.Stat
		err := c.call(ctx, c.cfg.Timeout, func() error {
			var err error
			st, err = c.conn.Set(p, mustJSON(rec), v.version)
			return err
		})
		if err == nil {
			c.mu.Lock()
			c.view[s] = shardView{ok: true, rec: rec, version: st.Version}
			if rec.WaitMs > 0 {
				c.storeAhead[s] = false
			}
			c.mu.Unlock()
			return
		}
		c.dirty[s].Store(true)
		if !errors.Is(err, zk.ErrBadVersion) {
			c.log.Warn("ORDERED shard: writing it released failed; retried later", zap.Int("shard", s), zap.Error(err))
			return
		}
		// Changed since read: read again; release if still ours.
		if err := c.readShard(ctx, s, false); err != nil {
			return
		}
		c.mu.Lock()
		v = c.view[s]
		c.mu.Unlock()
	}
}
