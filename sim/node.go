package sim

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/idgen/idgen/clock"
	clusterinc "github.com/idgen/idgen/cluster/incarnation"
	"github.com/idgen/idgen/cluster/zksession"
	"github.com/idgen/idgen/issuer"
	"github.com/idgen/idgen/ordered"
	"github.com/idgen/idgen/ordered/zkown"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/zkguard"
	"github.com/idgen/idgen/snowflake"
	"github.com/idgen/idgen/worker"
)

// Timings of the simulated cluster: the production defaults scaled down
// about 25 times, so a seed's few seconds hold many leases, sessions and
// heartbeats.
const (
	sessionTimeout = 400 * time.Millisecond
	heartbeat      = 100 * time.Millisecond
	outageTol      = 300 * time.Millisecond
	hwMargin       = 50 * time.Millisecond
	orderedLease   = 300 * time.Millisecond
	zkTimeout      = 200 * time.Millisecond
	callTimeout    = time.Second // a client's deadline per call
)

// node is one in-process idgen node: the real worker lease, issuer
// (snowflake generator and policy path), UNORDERED segments, ORDERED
// coordinator and allocator, wired to the simulated boundaries.
type node struct {
	c    *cluster
	idx  int
	addr string // host:port, the node's identity (properties file, ORDERED Self)
	// cluster is the node's cluster name (its ZooKeeper subtree under
	// /idgen): simCluster, or otherCluster for the intruder of hole k.
	cluster string
	dir     string // properties dir, kept across restarts
	clk     *clock.Offset
	// mono is the node's monotonic clock (what ORDERED's leases and
	// waits read): the true time less what VM freezes took from it
	// (vm-freeze). Kept across restarts, as the machine is.
	mono *clock.Offset

	// life serializes the lifecycle (start, stop, kill): two faults of
	// one node that overlap (a SIGTERM while the last restart is still
	// starting) act one after the other, as on one machine.
	life sync.Mutex

	mu     sync.Mutex
	inc    int           // incarnation: 1 for the first start
	paused chan struct{} // non-nil while paused; closed at the thaw
	up     bool          // serving (started, not killed or stopped)
	dead   bool          // killed or stopped: boundary calls fail
	// the parts of the current incarnation
	lease *worker.ZKLease
	is    *issuer.Issuer
	un    *segment.Unordered
	coord *zkown.Coordinator
	alloc *ordered.Allocator
	sess  *zksession.Session
	guard *zkguard.Guard
	// store is the incarnation's connection to the database (kept after
	// the incarnation ends: what it ran is counted).
	store *nodeDB
	// stopTouch stops the incarnation's heartbeat touches.
	stopTouch func()
	stall     time.Duration // next planned hand-off stalls this long before its write-back
	// afterStall runs (in the background) once that stall ended, just
	// before the late write-back.
	afterStall func()
}

// zkName is the ZooKeeper client name of the current incarnation (a
// killed incarnation's clients stay cut off; the next one's are new).
func (n *node) zkName() string { return fmt.Sprintf("%s#%d", n.addr, n.inc) }

// isUp reports whether the node serves.
func (n *node) isUp() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.up
}

// wait blocks while the node is paused.
func (n *node) wait() {
	for {
		n.mu.Lock()
		p := n.paused
		n.mu.Unlock()
		if p == nil {
			return
		}
		<-p
	}
}

// boundary is the gate of every store call of incarnation inc: it waits
// out a pause and fails once that incarnation was killed or stopped, also
// after the node restarted (a killed process makes no statement again:
// before, a killed incarnation's goroutines wrote again as soon as its
// successor started).
func (n *node) boundary(ctx context.Context, inc int) error {
	n.wait()
	n.mu.Lock()
	dead := n.dead || n.inc != inc
	n.mu.Unlock()
	if dead {
		return errDead
	}
	return ctx.Err()
}

// pausingClock is a clock that blocks while the node is paused: every
// goroutine of the node that reads the time freezes there, as in a
// stopped process (goroutines that read no clock and call no boundary
// keep running: the simulation's limit).
type pausingClock struct {
	n    *node
	base func() time.Time
}

func (p pausingClock) Now() time.Time {
	p.n.wait()
	return p.base()
}

// start runs a new incarnation. It returns once the node serves (or fails
// to start).
func (n *node) start(ctx context.Context) error {
	n.life.Lock()
	defer n.life.Unlock()
	n.mu.Lock()
	if n.up {
		// Already running: two overlapping faults each scheduled a
		// restart.
		n.mu.Unlock()
		return nil
	}
	n.inc++
	n.dead = false
	inc := n.inc
	n.mu.Unlock()
	c := n.c
	log := c.log.With(zap.String("node", n.addr), zap.Int("inc", inc))
	wall := pausingClock{n: n, base: n.clk.Now}
	mono := pausingClock{n: n, base: n.mono.Now}
	name := n.zkName()
	host, port := splitAddr(n.addr)
	// The cluster incarnation check, as the server runs it
	// (server/incarnation.go): at every (re)connect before any write,
	// after every slot claim and every heartbeat. Its record is the
	// node's properties file (kept across restarts; a fresh node has
	// none). No database witness: the simulated MySQL's cluster_binding
	// (db.bindCluster) keeps no incarnation marker, so a fresh node that starts first after a restore
	// is protected only by what the old nodes see (the configuration the
	// server refuses on one ZooKeeper server unless opted in).
	// The database is the check's witness, as with --mysql: a node whose
	// own writes predate a restore's copy learns from it that ZooKeeper
	// went back (seed 259: a restart right after a restore, its own
	// lineage intact in the copy, took a slot whose holder's claim the
	// copy lacked). Its own connection: its reads do not count as the
	// node's statements (an intruder of another cluster reads no row).
	wdb := &nodeDB{Store: c.db.mem, d: c.db, n: n, inc: inc}
	chk := clusterinc.NewChecker(clusterinc.Config{Root: "/idgen", Cluster: n.cluster, NodeKey: fmt.Sprintf("idgen:%d:%s", port, host),
		Record: worker.IncarnationRecord(n.dir, "idgen", port, host, n.cluster), Refused: zksession.ErrRefused,
		Witness: simWitness{s: wdb, cluster: n.cluster}, Logger: log.Named("incarnation")})
	// The node's one ZooKeeper session (cluster/zksession), shared by the
	// worker lease and the ORDERED coordinator as in the server; every
	// client it opens (a redial replaces the client) is a zkfake client of
	// this incarnation's name.
	sess, err := zksession.Start(zksession.Config{Servers: []string{"zk0:2181"}, SessionTimeout: sessionTimeout,
		Lead: heartbeat + outageTol + hwMargin, Logger: log.Named("zk"),
		Check: func(ctx context.Context, conn zksession.ZK) (bool, string, error) { return chk.Check(ctx, conn) },
		Connect: func(servers []string, to time.Duration) (zksession.ZK, <-chan zk.Event, error) {
			conn, ev := c.zk.Connect(name, to)
			return conn, ev, nil
		},
		ServerStats: func(servers []string, _ time.Duration) []zksession.ServerStat {
			var out []zksession.ServerStat
			for _, s := range c.zk.Stats() {
				out = append(out, zksession.ServerStat{Server: s.Server, Serving: s.Serving, Zxid: s.Zxid})
			}
			return out
		}})
	if err != nil {
		return fmt.Errorf("zksession: %w", err)
	}
	p := incarnation{sess: sess} // the components started so far, closed on a failure
	store := &nodeDB{Store: c.db.mem, d: c.db, n: n, inc: inc}
	n.mu.Lock()
	n.store = store
	n.mu.Unlock()
	holder := &worker.LateHolder{Fault: c.ctl.slot} // the server's holder; Fault: the slot's negative controls
	lease, err := worker.Register(ctx, worker.Config{Servers: []string{"zk0:2181"}, Root: "/idgen", Cluster: n.cluster,
		Meta: worker.Meta{EpochMs: worker.DefaultEpochMs, IDCBits: idcBits, NodeBits: nodeBits},
		App:  "idgen", Host: host, Port: port, PropertiesDir: n.dir, SessionTimeout: sessionTimeout,
		HeartbeatInterval: heartbeat, OutageTolerance: outageTol, HighWaterMargin: hwMargin, MaxStartWait: 10 * time.Second,
		ConnectTimeout: 2 * time.Second, Session: sess, Clock: wall, Holder: holder, AfterClaim: chk.AfterClaim(sess),
		Logger: log.Named("worker")})
	if err != nil {
		p.close(false) // what started so far, as a crash would leave it
		return fmt.Errorf("worker: %w", err)
	}
	p.lease = lease
	// One database, one cluster (server/main.go, after the lease starts
	// and before anything serves from the store): the database's binding
	// is checked, and a node of another cluster stops here.
	if !c.ctl.noBinding {
		if err := c.db.bindCluster(n.cluster, lease.Meta().CreatedMs); err != nil {
			p.close(false) // what started so far, as a crash would leave it
			return err
		}
	}
	stopTouch := chk.TouchEvery(heartbeat, sess, log.Named("incarnation"))
	p.stopTouch = stopTouch
	layout := snowflake.Layout{IDCBits: idcBits, NodeBits: nodeBits}.Normalize()
	floor := layout.Floor(lease.Meta().CreatedMs)
	guard := clock.NewGuard(clock.GuardConfig{Clock: wall, Logger: log.Named("clock")}, 0)
	// The replication guard (segment/zkguard) on the same session: the
	// ledger of UNORDERED segments and the ORDERED barrier after a server
	// change of the simulated MySQL (db.failover).
	// Instance is the incarnation's number: a member counted gone names
	// the incarnation whose answers the limit explains, not the one
	// running when it was counted (seed 1120: a killed incarnation's
	// successor runs by then).
	guardCfg := zkguard.Config{Session: sess, Root: "/idgen", Cluster: n.cluster, Self: n.addr, Instance: strconv.Itoa(inc), Timeout: zkTimeout,
		BarrierWait: time.Second, MemberLease: time.Second, MaxClockSkew: 500 * time.Millisecond, Now: wall.Now,
		Disabled: c.ctl.noGuard, Logger: log.Named("guard"),
		OnMembersGone: func(members []zkguard.Member) {
			for _, m := range members {
				if i, err := strconv.Atoi(m.Instance); err == nil {
					c.limits.memberGone(time.Now(), m.Node, i)
				}
			}
		}}
	g, err := zkguard.Open(guardCfg)
	if err != nil {
		p.close(false) // what started so far, as a crash would leave it
		return fmt.Errorf("zkguard: %w", err)
	}
	p.guard = g
	// Wired as the server does (server/replication.go startGuard), also
	// under the control: a Disabled guard admits everything, so
	// IDGEN_FAULT_NO_REPLICATION_GUARD reopens the hole for ORDERED too.
	store.onChange = g.ServerChanged
	var (
		ledger segment.Ledger = g
		gate   segment.Gate   = g
	)
	un, err := segment.NewUnordered(segment.UnorderedConfig{Store: store, Floor: floor, Logger: log.Named("unordered"), Ledger: ledger,
		RetryBackoff: 20 * time.Millisecond, MaxRetryBackoff: 200 * time.Millisecond}) // the defaults scaled like the other timings
	if err != nil {
		p.close(false) // what started so far, as a crash would leave it
		return err
	}
	p.un = un
	coord, err := zkown.Open(ctx, zkown.Config{Session: sess, Root: "/idgen", Cluster: n.cluster, Self: n.addr,
		SessionTimeout: sessionTimeout, Lease: orderedLease, Clock: mono, Wall: wall, Timeout: zkTimeout, HandlerTimeout: time.Second,
		UnsafeNoLeaseWait: c.ctl.noLeaseWait, StoreLease: true, Logger: log.Named("owners")})
	if err != nil {
		p.close(false) // what started so far, as a crash would leave it
		return fmt.Errorf("zkown: %w", err)
	}
	p.coord = coord
	alloc, err := ordered.New(ordered.Config{Store: store, Coordinator: coord, Self: n.addr, Clock: mono, Wall: wall, Window: 50 * time.Millisecond, Gate: gate,
		Timeout: 500 * time.Millisecond, Logger: log.Named("ordered"), BeforeWriteBack: n.beforeWriteBack})
	if err != nil {
		p.close(false) // what started so far, as a crash would leave it
		return err
	}
	if err := coord.Start(ctx, alloc); err != nil {
		p.close(false) // what started so far, as a crash would leave it
		return err
	}
	is, err := issuer.New(issuer.Config{Store: store, Unordered: un, Ordered: alloc, Bizs: segment.NewBizCache(store, time.Second),
		Layout: layout, Guard: guard, Floor: floor, ExtendNow: lease.RequestExtend, Logger: log.Named("issuer")})
	if err != nil {
		p.close(false) // what started so far, as a crash would leave it
		return err
	}
	holder.Attach(is)
	marks := func() []segment.OrderedMark { return segment.Marks(alloc.Remembered) }
	g.StartBarrier(store, zkguard.Repair{Flush: func(ctx context.Context) error {
		if err := store.raiseOwned(ctx, marks()); err != nil {
			return err
		}
		var reqs []ordered.Request
		alloc.RememberedRequests(func(q ordered.Request) { reqs = append(reqs, q) })
		return store.restoreRequests(ctx, reqs)
	}, Remembered: marks, Raise: store.raiseOwned})
	n.mu.Lock()
	n.lease, n.is, n.un, n.coord, n.alloc, n.sess, n.guard, n.stopTouch, n.up = lease, is, un, coord, alloc, sess, g, stopTouch, true
	n.mu.Unlock()
	return nil
}

// beforeWriteBack stalls a planned hand-off once when the schedule asked
// for it (the deposed owner's late write-back the epoch must refuse).
func (n *node) beforeWriteBack(shard int) {
	if !loadShards[shard] {
		return // a shard without traffic: a late write-back there shows nothing
	}
	n.mu.Lock()
	d, after := n.stall, n.afterStall
	n.stall, n.afterStall = 0, nil
	n.mu.Unlock()
	if d > 0 {
		// Frozen in the middle of the hand-off, past the node's
		// ZooKeeper session and its lease: another node takes the shard,
		// and the write-back that follows is a deposed owner's.
		n.pause()
		time.Sleep(d)
		n.thaw()
	}
	if after != nil {
		go after()
	}
}

// serve answers one request, as the node's RPC handler would: it waits
// out a pause before it reads the request and before the answer leaves.
func (n *node) serve(ctx context.Context, req issuer.Request) (issuer.Response, error, bool) {
	n.wait()
	n.mu.Lock()
	is, up := n.is, n.up
	n.mu.Unlock()
	if !up {
		return issuer.Response{}, nil, false
	}
	resp, err := is.Next(ctx, req)
	n.wait()
	n.mu.Lock()
	up = n.up
	n.mu.Unlock()
	return resp, err, up
}

// pause freezes the node (ZooKeeper clients, store calls, clocks, request
// handling) until thaw.
func (n *node) pause() {
	n.mu.Lock()
	if n.paused == nil {
		n.paused = make(chan struct{})
	}
	name := n.zkName()
	n.mu.Unlock()
	n.c.zk.SetPaused(name, true)
}

// freeze is a VM freeze of d: the node stops as in pause, and at the
// resume its monotonic clock has not moved while the wall clock (and
// every other node) went on: ORDERED's leases, read on the monotonic
// clock, lost d. Set before the thaw, so no goroutine of the node reads
// the clock in between (pausingClock blocks while paused).
func (n *node) freeze(d time.Duration) {
	n.pause()
	start := time.Now()
	time.Sleep(d)
	n.mono.Set(n.mono.Get() - time.Since(start))
	n.thaw()
}

func (n *node) thaw() {
	n.mu.Lock()
	p := n.paused
	n.paused = nil
	name := n.zkName()
	n.mu.Unlock()
	n.c.zk.SetPaused(name, false)
	if p != nil {
		close(p)
	}
}

// kill ends the incarnation as SIGKILL would: it stops answering at once,
// its ZooKeeper clients are cut off for good (their sessions expire on
// the server), and its store calls fail. Its goroutines are stopped
// later, without a hand-off (closeQuietly).
func (n *node) kill() {
	n.life.Lock()
	defer n.life.Unlock()
	n.thaw()
	n.mu.Lock()
	n.up, n.dead = false, true
	name := n.zkName()
	parts := n.parts()
	n.mu.Unlock()
	n.c.zk.Kill(name) // for good: a partition's heal does not revive it
	n.c.graveyard(parts)
}

// stop is SIGTERM: the ORDERED shards are handed off (exact counters
// written back), then the lease writes its exact mark and releases the
// slot.
func (n *node) stop() {
	n.life.Lock()
	defer n.life.Unlock()
	n.thaw()
	n.mu.Lock()
	n.up = false
	parts := n.parts()
	n.mu.Unlock()
	parts.close(true)
	n.mu.Lock()
	n.dead = true
	n.mu.Unlock()
}

// parts is the running incarnation's components; n.mu is held.
func (n *node) parts() incarnation {
	p := incarnation{lease: n.lease, un: n.un, coord: n.coord, sess: n.sess, guard: n.guard, stopTouch: n.stopTouch}
	n.lease, n.is, n.un, n.coord, n.alloc, n.sess, n.guard, n.stopTouch = nil, nil, nil, nil, nil, nil, nil, nil
	return p
}

// incarnation is what closes when a node goes.
type incarnation struct {
	lease *worker.ZKLease
	un    *segment.Unordered
	coord *zkown.Coordinator
	sess  *zksession.Session
	guard *zkguard.Guard
	// stopTouch stops the heartbeat touches of the cluster incarnation.
	stopTouch func()
}

// close stops the components; graceful hands off and releases (SIGTERM),
// otherwise they are stopped after the fact (a killed process's memory is
// gone; its ZooKeeper clients are already cut off, so the close writes
// nothing).
func (p incarnation) close(graceful bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if p.coord != nil {
		_ = p.coord.Close(ctx)
	}
	if p.un != nil {
		_ = p.un.Close()
	}
	if p.guard != nil {
		p.guard.Close()
	}
	if p.lease != nil {
		_ = p.lease.Close(ctx)
	}
	if p.stopTouch != nil {
		p.stopTouch()
	}
	if p.sess != nil {
		p.sess.Close() // last, as the server closes it
	}
}

func splitAddr(a string) (string, int) {
	var host string
	var port int
	for i := len(a) - 1; i >= 0; i-- {
		if a[i] == ':' {
			host = a[:i]
			fmt.Sscanf(a[i+1:], "%d", &port)
			break
		}
	}
	return host, port
}
