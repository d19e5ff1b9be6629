package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/idgen/idgen/clock"
	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/cluster/zksession"
)

// Register claims a worker slot in ZooKeeper and hands it to cfg.Holder
// (Holder.Acquired is called before Register returns), then keeps it:
// heartbeats raise the slot's high-water mark, connection loss fences the
// holder, session expiry re-claims a slot.
//
// At start it
//   - creates the cluster meta or checks this node's settings against it
//     (ErrMetaMismatch names the setting);
//   - compares the clock with the peers' median (ErrClockSkew);
//   - claims the slot cached in the properties file if it is free, else
//     the least recently used free slot (ErrNoFreeSlot when none is);
//   - waits until the clock is past the slot's high-water mark (the larger
//     of last/<node> and the cached one), or refuses with
//     ErrStartWaitTooLong when that is more than MaxStartWait away;
//   - publishes its member znode.
//
// When ZooKeeper gives no session within ConnectTimeout, the slot cached in
// the properties file is used if AllowCachedSlotWithoutZK (state degraded,
// logged at warn) and claimed once ZooKeeper answers; otherwise Register
// fails with ErrZKUnavailable.
func Register(ctx context.Context, cfg Config) (*ZKLease, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	l := &ZKLease{
		cfg:     cfg,
		log:     cfg.Logger.With(zap.String("cluster", cfg.Cluster), zap.Int("idc", cfg.IDC)),
		l:       layout{root: cfg.Root, cluster: cfg.Cluster},
		acl:     aclFor(cfg.Auth),
		props:   propertiesPath(cfg.PropertiesDir, cfg.App, cfg.Port, cfg.Host),
		pid:     os.Getpid(),
		started: cfg.Clock.Now(),
		done:    make(chan struct{}),
		extend:  make(chan struct{}, 1),
		state:   StateNone,
		token:   newToken(),
	}
	cached, hasCache, cacheErr := l.readCache()
	if cacheErr != nil {
		l.log.Warn("properties file unreadable: its cached slot is ignored", zap.Error(cacheErr))
	}
	l.cached, l.hasCached = cached, hasCache
	l.sess = cfg.Session
	if l.sess == nil {
		s, err := zksession.Start(zksession.Config{Servers: cfg.Servers, SessionTimeout: cfg.SessionTimeout, Auth: cfg.Auth,
			Connect: cfg.Connect, ServerStats: cfg.ServerStats, Lead: cfg.Lead(), Logger: cfg.Logger.Named("zk")})
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrZKUnavailable, err)
		}
		l.sess, l.ownSess = s, true
	}
	l.conn = l.sess.Conn()

	wctx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	err := l.sess.Wait(wctx)
	cancel()
	switch {
	case err == nil:
		err = l.startZK(ctx, cached, hasCache)
	case errors.Is(err, zksession.ErrRefused):
		err = fmt.Errorf("%w: %w", ErrZKUnavailable, err)
	case ctx.Err() != nil:
		err = fmt.Errorf("%w: waiting for a session: %w", ErrZKUnavailable, ctx.Err())
	default:
		err = l.startDegraded(ctx, cached, hasCache, cacheErr)
	}
	if err != nil {
		if l.ownSess {
			l.sess.Close()
		}
		return nil, err
	}
	mctx, cancel := context.WithCancel(context.Background())
	l.cancel = cancel
	go l.run(mctx)
	return l, nil
}

// startClaimAttempts bounds the claims a start makes when the step after
// a claim fails (ErrAfterClaim): a loss of ZooKeeper state seen right
// after the claim is claimed again on the meta the loss marked.
const startClaimAttempts = 3

// afterClaim runs Config.AfterClaim after the claim of node and its mark
// were written.
func (l *ZKLease) afterClaim(ctx context.Context, node int) error {
	if l.cfg.AfterClaim == nil {
		return nil
	}
	if err := l.cfg.AfterClaim(ctx); err != nil {
		l.log.Warn("the step after the worker slot claim failed: the slot does not serve, claimed again",
			zap.Int("node", node), zap.Error(err))
		return fmt.Errorf("%w (slot idc %d node %d): %w", ErrAfterClaim, l.cfg.IDC, node, err)
	}
	return nil
}

// startZK is the start with a ZooKeeper session; a claim whose
// AfterClaim failed is released and made again (from prepare, which reads
// the meta a loss of state marked).
func (l *ZKLease) startZK(ctx context.Context, cached properties, hasCache bool) error {
	var err error
	for range startClaimAttempts {
		if err = l.startZKOnce(ctx, cached, hasCache); !errors.Is(err, ErrAfterClaim) || ctx.Err() != nil {
			return err
		}
	}
	return err
}

func (l *ZKLease) startZKOnce(ctx context.Context, cached properties, hasCache bool) error {
	meta, err := l.prepare()
	if err != nil {
		return err
	}
	self := peer{l.cfg.Host, l.cfg.Port}
	if l.cfg.PeerClock != nil {
		peers, err := clusterPeers(l.conn, l.l, self)
		if err != nil {
			return err
		}
		if err := checkPeerClocks(ctx, peers, l.cfg.PeerClock, l.cfg.Clock,
			l.cfg.PeerClockTimeout, l.cfg.MaxPeerClockSkew, l.log); err != nil {
			return err
		}
	}
	// A clean restart resumes its own slot (its exact mark has passed). A
	// crash restart's cached mark is a look-ahead up to Lead in the
	// future: it takes the least recently used free slot whose mark has
	// passed instead, so it serves at once, and its own slot only if
	// nothing else is free.
	prefer, preferHW, avoid := -1, int64(0), -1
	if hasCache && cached.Cluster == l.cfg.Cluster && cached.IDC == l.cfg.IDC && cached.Node < 1<<meta.NodeBits {
		if cached.Exact || cached.HighWater < clock.Millis(l.cfg.Clock) {
			prefer, preferHW = cached.Node, cached.HighWater
		} else {
			avoid, preferHW = cached.Node, cached.HighWater
			l.log.Info("restart after a crash: taking a slot whose mark has passed rather than waiting for the cached one",
				zap.Int("cached_node", cached.Node), zap.Int64("cached_mark_ms", cached.HighWater))
		}
	}
	sid := l.conn.SessionID()
	c := l.claimer(meta)
	node, _, err := l.claimNode(ctx, c, prefer, avoid)
	if err != nil {
		return err
	}
	node, last, err := l.readClaimed(ctx, c, node)
	if err != nil {
		_ = c.release(node)
		return err
	}
	markNB := last.HighWater
	if node == prefer || node == avoid {
		markNB = max(markNB, preferHW)
	}
	l.setLastVersion(last)
	s, member, err := l.enterSlot(ctx, c, meta, node, markNB, l.claimBound(last.exists), true)
	if err != nil {
		return err
	}
	l.mu.Lock()
	l.state, l.slot, l.hasSlot, l.sid, l.member = StateRegistered, s, true, sid, member
	l.mu.Unlock()
	l.log.Info("worker slot acquired", slotFields(s, sid)...)
	l.cfg.Holder.Acquired(s)
	return nil
}

// prepare checks or creates the cluster meta and the IDC's directories.
// It runs at start and again after ZooKeeper comes back. (The session
// adds the digest credential to every client before it is usable.)
func (l *ZKLease) prepare() (Meta, error) {
	// The root may be shared by clusters: it stays open, the cluster's
	// subtree carries the ACL.
	if err := cluster.EnsurePath(l.conn, l.cfg.Root, zk.WorldACL(zk.PermAll)); err != nil {
		return Meta{}, err
	}
	meta, err := l.loadCluster()
	if err != nil {
		return Meta{}, err
	}
	for _, p := range []string{l.l.members(l.cfg.IDC), l.l.slots(l.cfg.IDC), l.l.lastDir(l.cfg.IDC)} {
		if err := cluster.EnsurePath(l.conn, p, l.acl); err != nil {
			return Meta{}, err
		}
	}
	l.mu.Lock()
	l.meta, l.metaOK = meta, true
	l.mu.Unlock()
	return meta, nil
}

// claimNode claims prefer if it is free (or already this session's), else
// the least recently used free slot, taking avoid only when no other slot
// is free. preferOwner is the session holding prefer when it was taken by
// another node (0 otherwise).
func (l *ZKLease) claimNode(ctx context.Context, c claimer, prefer, avoid int) (node int, preferOwner int64, err error) {
	if prefer >= 0 {
		ok, owner, err := c.tryClaim(ctx, prefer)
		if err != nil {
			return 0, 0, err
		}
		if ok {
			return prefer, 0, nil
		}
		preferOwner = owner
		l.log.Info("cached worker slot is held by another node: taking another",
			zap.Int("node", prefer), zap.String("holder_session", sessionHex(owner)))
	}
	skip := prefer
	if avoid >= 0 {
		skip = avoid
	}
	node, err = c.claimLRU(ctx, skip, l.claimBound(false))
	if errors.Is(err, ErrNoFreeSlot) && avoid >= 0 {
		ok, owner, cerr := c.tryClaim(ctx, avoid)
		if cerr != nil {
			return 0, 0, cerr
		}
		if ok {
			return avoid, 0, nil
		}
		return 0, owner, err
	}
	return node, preferOwner, err
}

// enterSlot makes a claimed slot usable (rule 2): it records a fresh
// high-water mark in last/<node> (conditional on the version read when the
// slot was claimed) and the properties file, and publishes the member
// znode. It does not wait for the clock to pass notBefore: the slot is
// handed over with NotBefore and the holder refuses, with the time left,
// until then. A wait longer than MaxStartWait is refused when refuse is
// set (the clock is far behind). On error the claim is released.
func (l *ZKLease) enterSlot(ctx context.Context, c claimer, meta Meta, node int, markNB, clusterNB int64, refuse bool) (s Slot, member string, err error) {
	notBefore := max(markNB, clusterNB)
	s = Slot{IDC: l.cfg.IDC, Node: node, Worker: meta.Worker(l.cfg.IDC, node), NotBefore: notBefore, MarkNotBefore: markNB}
	defer func() {
		if err != nil {
			_ = c.release(node)
		}
	}()
	if err := l.checkRegistry(); err != nil {
		return Slot{}, "", err
	}
	if werr := checkWait(l.cfg.Clock, s, l.cfg.MaxStartWait); werr != nil {
		if refuse {
			return Slot{}, "", werr
		}
		l.log.Error("waiting long for the clock to pass the slot's high-water mark", zap.Error(werr))
	} else if d := time.Duration(notBefore-clock.Millis(l.cfg.Clock)) * time.Millisecond; d > 0 {
		why := "the slot's high-water mark (what earlier holders may have used)"
		if clusterNB > markNB {
			why = "one lead after the cluster was restored or its ZooKeeper ensemble changed epoch (marks written before may be lost)"
		}
		l.log.Info("SNOWFLAKE waits for the clock to pass "+why+"; other channels serve meanwhile",
			zap.Int("node", node), zap.Int64("not_before_ms", notBefore), zap.Int64("mark_not_before_ms", markNB), zap.Duration("wait", d))
	}
	l.mu.Lock()
	l.ceiling = 0 // the claim is this session's now
	l.mu.Unlock()
	hw := l.nextMark(notBefore)
	if _, err := l.writeLast(s, hw, false); err != nil {
		return Slot{}, "", err
	}
	l.raiseMark(hw)
	if err := l.writeProps(s, meta, hw); err != nil {
		return Slot{}, "", err
	}
	if err := l.afterClaim(ctx, node); err != nil {
		return Slot{}, "", err
	}
	s.HighWater = hw
	member, err = createMember(ctx, l.conn, l.l.members(l.cfg.IDC), l.memberData(s), l.acl)
	if err != nil {
		return Slot{}, "", err
	}
	l.mu.Lock()
	l.beatAt = time.Now()
	l.mu.Unlock()
	return s, member, nil
}

func (l *ZKLease) memberData(s Slot) []byte {
	return toJSON(memberData{
		Host: l.cfg.Host, Port: l.cfg.Port, PID: l.pid, Version: l.cfg.Version,
		StartedAt: rfc3339(l.started.UnixMilli()), StartedAtMs: l.started.UnixMilli(),
		IDC: s.IDC, Slot: s.Node, Worker: s.Worker, Session: sessionHex(l.conn.SessionID()),
	})
}

// startDegraded is the start without ZooKeeper: the cached slot, if allowed
// and usable, after waiting past its cached high-water mark.
func (l *ZKLease) startDegraded(ctx context.Context, cached properties, hasCache bool, cacheErr error) error {
	servers := strings.Join(l.cfg.Servers, ",")
	switch {
	case !l.cfg.allowCached():
		return fmt.Errorf("%w: no session with %s within %v, and AllowCachedSlotWithoutZK is off",
			ErrZKUnavailable, servers, l.cfg.ConnectTimeout)
	case cacheErr != nil:
		return fmt.Errorf("%w: no session with %s within %v, and the cached slot is unusable: %w",
			ErrZKUnavailable, servers, l.cfg.ConnectTimeout, errors.Join(ErrNoCachedSlot, cacheErr))
	case !hasCache:
		return fmt.Errorf("%w: no session with %s within %v, and %w (no %s)",
			ErrZKUnavailable, servers, l.cfg.ConnectTimeout, ErrNoCachedSlot, l.props)
	case cached.Cluster != l.cfg.Cluster || cached.IDC != l.cfg.IDC:
		return fmt.Errorf("%w: no session with %s within %v, and %w: %s caches cluster %q idc %d, this node is cluster %q idc %d",
			ErrZKUnavailable, servers, l.cfg.ConnectTimeout, ErrNoCachedSlot, l.props, cached.Cluster, cached.IDC, l.cfg.Cluster, l.cfg.IDC)
	case cached.Meta.validate("") != nil || cached.Meta.CreatedMs == 0:
		return fmt.Errorf("%w: no session with %s within %v, and %w: %s has no cluster settings",
			ErrZKUnavailable, servers, l.cfg.ConnectTimeout, ErrNoCachedSlot, l.props)
	}
	if err := compareMeta(cached.Meta, l.cfg.Meta, l.props); err != nil {
		return err
	}
	meta := cached.Meta
	if cached.Node < 0 || cached.Node >= 1<<meta.NodeBits {
		return fmt.Errorf("%w: %s caches node %d, outside the %d node bits", ErrNoCachedSlot, l.props, cached.Node, meta.NodeBits)
	}
	// The slot is safe only while the last run's claim still holds it:
	// at least a session timeout after ZooKeeper last confirmed its mark.
	// And the last run may have issued up to its mark, so nothing at or
	// below it. Between the two, and nowhere else, no other node can issue
	// on the slot (issue 17 item 3).
	now := clock.Millis(l.cfg.Clock)
	deadline := cached.ZKContactMs + (l.cfg.SessionTimeout - l.cfg.HighWaterMargin - l.cfg.MaxPeerClockSkew).Milliseconds()
	switch {
	case cached.Exact:
		return fmt.Errorf("%w: no session with %s within %v, and the cached slot (node %d) was released by a clean shutdown: another node may hold it now; start this node when ZooKeeper answers",
			ErrZKUnavailable, servers, l.cfg.ConnectTimeout, cached.Node)
	case cached.ZKContactMs == 0:
		return fmt.Errorf("%w: no session with %s within %v, and %s does not say when ZooKeeper last confirmed the cached slot's claim (written by an older idgen)",
			ErrZKUnavailable, servers, l.cfg.ConnectTimeout, l.props)
	case cached.HighWater >= deadline || now >= deadline:
		return fmt.Errorf("%w: no session with %s within %v, and the cached slot (node %d) is not safe to use: its last run may have issued up to %s, but its claim may expire from %s (ZooKeeper last confirmed it at %s, session timeout %v); another node may then take the slot and issue above that mark too. Start this node when ZooKeeper answers",
			ErrZKUnavailable, servers, l.cfg.ConnectTimeout, cached.Node, rfc3339(cached.HighWater), rfc3339(deadline), rfc3339(cached.ZKContactMs), l.cfg.SessionTimeout)
	}
	s := Slot{IDC: cached.IDC, Node: cached.Node, Worker: meta.Worker(cached.IDC, cached.Node), NotBefore: cached.HighWater, MarkNotBefore: cached.HighWater}
	if err := checkWait(l.cfg.Clock, s, l.cfg.MaxStartWait); err != nil {
		return err
	}
	l.mu.Lock()
	l.ceiling, l.zkContact = deadline, cached.ZKContactMs
	l.mu.Unlock()
	hw := l.nextMark(s.NotBefore)
	if err := l.writeProps(s, meta, hw); err != nil {
		return err
	}
	s.HighWater = hw
	l.mu.Lock()
	l.state, l.meta, l.slot, l.hasSlot, l.hw, l.beatAt = StateDegraded, meta, s, true, hw, time.Now()
	l.mu.Unlock()
	l.log.Warn("ZooKeeper unreachable at start: serving with the cached worker slot (degraded) until it returns, at most until its old claim may expire",
		zap.String("servers", servers), zap.Duration("waited", l.cfg.ConnectTimeout), zap.Int64("until_ms", deadline),
		zap.Int("node", s.Node), zap.Int("worker", s.Worker), zap.String("properties", l.props))
	l.cfg.Holder.Acquired(s)
	return nil
}

func slotFields(s Slot, sid int64) []zap.Field {
	return []zap.Field{
		zap.Int("node", s.Node), zap.Int("worker", s.Worker),
		zap.Int64("not_before_ms", s.NotBefore), zap.Int64("high_water_ms", s.HighWater),
		zap.String("session", sessionHex(sid)),
	}
}
