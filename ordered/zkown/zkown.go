// Package zkown is the ZooKeeper ordered.Coordinator of a cluster: it
// decides which node owns each of the 64 ORDERED shards, hands out the
// shards' epochs, runs this node's lease and enforces the lease wait of a
// takeover.
//
// Layout under /<root>/<cluster>/ordered/ (JSON, readable with zkCli get):
//
//   - nodes/<id> (EPHEMERAL): one per running coordinator: addr, id,
//     lease_ms, pid, host, version, started_at_ms, renewed_at_ms. The id is the
//     RPC address plus a random 64-bit suffix, new for every process and
//     for every re-creation of the znode (session expiry), so an id never
//     comes back once its znode is gone.
//   - shards/NN (PERSISTENT, 00..63): owner (an id or ""), addr, epoch,
//     state ("owned" or "released"), updated_at_ms. Created on demand
//     (epoch 0, released); every change is a compare-and-set on the
//     version read.
//
// The lease is per node (see lease.go for why it is sound). The node
// renews it by writing nodes/<id> every Lease/3; a renewal sent at t
// (Config.Clock, read before the call) whose answer arrives while the
// lease still runs extends ValidUntil to t + Lease - LeaseMargin. An
// answer that arrives later revives nothing: the lease is broken and every
// shard held is lost (Handler.Lost). The Allocator refuses to answer from
// ValidUntil on; the coordinator calls Lost once the clock passes it.
//
// Every other node polls nodes/ every round (Lease/6) and records, per
// foreign id, the local time it first observed the znode's current write
// (mzxid), or first observed it absent. An id whose znode is absent, or
// has not changed for Lease (Lease/2 with UnsafeNoLeaseWait) since, is
// stale; the others are live.
//
// A shard's desired owner is the rendezvous-hash winner among the live
// nodes' addresses (not ids: a restarted node gets its shards back). One
// goroutine reconciles on every tick, on watch events and when the lease
// breaks: it reads the shards (before the nodes: an owner missing from the
// listing that follows was gone before it was read), polls the nodes, then
// per shard:
//
//   - held, but the znode names another owner or epoch: Lost at once;
//   - released (or no owner), desired here: take it at epoch+1, serving
//     from now (its previous owner released it after it stopped);
//   - owned by a stale id, desired here: take it at epoch+1 with a Multi
//     that checks the old owner's znode version (when present), serving
//     from lastChange + Lease + LeaseMargin; serving from now when the
//     stale id is this node's own previous process, proven dead
//     (predecessor.go);
//   - owned by a live id: wait (it hands off by itself);
//   - held, desired elsewhere, the desired node live for a Lease: planned
//     hand-off (Handler.Release, then the znode released at the same
//     epoch), at most MaxHandoffs per round;
//   - owned by this node's id (or an earlier id of it) but not served
//     (a lease that broke, an Acquire that failed): taken again at
//     epoch+1 when desired here, released otherwise.
//
// A takeover is granted (Handler.Acquire) only when the lease ran without
// a break from before its compare-and-set to after it. An Acquire error
// gives the shard up with a backoff. Until a takeover's NotBefore has
// passed, the shard is neither written released nor granted again earlier
// by this node: a released shard is served at once by the next owner.
// Without an answer from ZooKeeper nothing changes hands.
//
// The ZooKeeper client is the node's session manager (cluster/zksession,
// Config.Session), shared with the other guards: it replaces a client the
// ensemble will never take back (a wiped ensemble refuses its handshakes
// forever) and runs the cluster incarnation check before any write. When
// it reports a wipe or restore (View.Restores grows) the coordinator
// applies the restore rule (restore.go): it stops serving, re-joins under
// a new id, and every shard it takes serves one lease after the detection
// at the earliest; a store epoch at or above the grant is waited out too.
package zkown

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/cluster/zksession"
	"github.com/idgen/idgen/ordered"
	"github.com/idgen/idgen/segment"
)

// Shards is the number of ORDERED shards.
const Shards = segment.OrderedShards

// Defaults of Config.
const (
	DefaultLease          = time.Second // server.Config.OrderedLease says why and what it costs
	DefaultSessionTimeout = 10 * time.Second
	DefaultTimeout        = 2 * time.Second
	DefaultHandlerTimeout = 10 * time.Second
	DefaultMaxHandoffs    = 8
)

// Shard states in shards/NN.
const (
	StateOwned    = "owned"
	StateReleased = "released"
)

// Config configures Open.
type Config struct {
	// Session is the node's shared ZooKeeper session (zksession): the
	// coordinator never closes it. Nil: Open opens its own from Servers,
	// Auth and SessionTimeout, closed by Close.
	Session        *zksession.Session
	Servers        []string
	Root, Cluster  string
	Auth           string // optional digest "user:password" (the znodes get its ACL)
	SessionTimeout time.Duration
	// Self is this node's RPC address host:port (what clients connect to).
	Self string
	// Lease is the node's lease (default 1s); LeaseMargin (default
	// Lease/20 + 5ms) covers the rate difference of two machines' clocks.
	Lease, LeaseMargin time.Duration
	// Clock is the monotonic clock of the lease (default
	// ordered.SystemClock).
	Clock ordered.Clock
	// Wall is the wall clock the lease also ends on (default
	// ordered.WallClock, or Clock when that is not the system's): a
	// frozen VM's monotonic clock stops, its wall clock does not
	// (ValidUntilWall).
	Wall ordered.Clock
	// UnsafeNoLeaseWait switches the lease wait off: takeovers get
	// NotBefore = now and a foreign owner is stale as soon as it misses one
	// renewal (no change for Lease/2: the renewal interval Lease/3 plus a
	// polling period). Fault injection's negative control only; logged at
	// error level.
	UnsafeNoLeaseWait bool
	Logger            *zap.Logger
	Version           string
	// Timeout bounds one ZooKeeper operation (default 2s; a renewal is
	// bounded by Lease/3).
	Timeout time.Duration
	// HandlerTimeout bounds one Handler.Acquire or Handler.Release
	// (default 10s).
	HandlerTimeout time.Duration
	// MaxHandoffs bounds the planned hand-offs of one round (default 8).
	MaxHandoffs int
	// StoreLease: the handler Start gets holds leases in the store
	// (ordered.LeaseHandler, storelease.go). Advertised in nodes/<id>
	// from its creation, so the other nodes count on it from their first
	// look (a node that does not advertise it keeps every node's lease on
	// ZooKeeper alone); Start refuses a handler without it. False: the
	// handler's own word, published from its first renewal on.
	StoreLease bool
	// StoreSafe reports whether a failover of the store can lose nothing
	// it acknowledged (the replication verdict, read fresh: the server's
	// replication watch). The store lease is renewed only while it says
	// so: with a lossy replication, a node cut off from ZooKeeper that
	// kept its shards through the store would, across a lossy failover,
	// be counted gone by the others' barrier while the rows it remembers
	// are missing on the new server (the fault scenario
	// ordered-zk-partition-failover found the duplicates). Nil: always.
	StoreSafe func() bool

	// Tests only: this process's pid (default os.Getpid()), its Host
	// (default processHost()) and processGone (predecessor.go).
	pid         int
	host        string
	processGone func(pid int) bool
	// unsafeIgnoreStoreLease: this node's takeovers ignore the store's
	// leases (the negative control of storelease_test.go; the binaries'
	// is IDGEN_FAULT_ORDERED_IGNORE_STORE_LEASE).
	unsafeIgnoreStoreLease bool
}

func (cfg *Config) defaults() error {
	if cfg.Root == "" || cfg.Cluster == "" || cfg.Self == "" {
		return errors.New("zkown: Config.Root, Cluster and Self are required")
	}
	if strings.Contains(cfg.Cluster, "/") {
		return fmt.Errorf("zkown: Config.Cluster %q contains '/'", cfg.Cluster)
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.Lease <= 0 {
		cfg.Lease = DefaultLease
	}
	if cfg.LeaseMargin == 0 {
		cfg.LeaseMargin = cfg.Lease/20 + 5*time.Millisecond
	}
	if cfg.LeaseMargin < 0 || cfg.LeaseMargin >= cfg.Lease/3 {
		return fmt.Errorf("zkown: LeaseMargin %v must be in [0, Lease/3) (Lease %v)", cfg.LeaseMargin, cfg.Lease)
	}
	if cfg.Clock == nil {
		cfg.Clock = ordered.SystemClock{}
	}
	if cfg.Wall == nil {
		cfg.Wall = ordered.DefaultWall(cfg.Clock)
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.HandlerTimeout <= 0 {
		cfg.HandlerTimeout = DefaultHandlerTimeout
	}
	if cfg.MaxHandoffs <= 0 {
		cfg.MaxHandoffs = DefaultMaxHandoffs
	}
	if cfg.pid == 0 {
		cfg.pid = os.Getpid()
	}
	if cfg.host == "" {
		cfg.host = processHost()
	}
	if cfg.processGone == nil {
		cfg.processGone = processGone
	}
	return nil
}

// nodeRecord is the JSON of nodes/<id>. The *_ms fields are wall-clock
// Unix ms, for people only: the lease is computed on each node's own
// monotonic clock.
type nodeRecord struct {
	Addr    string `json:"addr"`
	ID      string `json:"id"`
	LeaseMs int64  `json:"lease_ms"`
	PID     int    `json:"pid"`
	// Host is the kernel boot and pid namespace PID lives in (see
	// predecessor.go); "" when unknown.
	Host        string `json:"host,omitempty"`
	Version     string `json:"version"`
	StartedAtMs int64  `json:"started_at_ms"`
	RenewedAtMs int64  `json:"renewed_at_ms"`
	// Closing: the node is handing its shards off to leave; no shard is
	// handed to it meanwhile.
	Closing bool `json:"closing,omitempty"`
	// StoreLease: the node renews its lease in the store and respects
	// the store's leases when it takes a shard over (storelease.go).
	StoreLease bool `json:"store_lease,omitempty"`
}

// shardRecord is the JSON of shards/NN.
type shardRecord struct {
	Owner       string `json:"owner"`
	Addr        string `json:"addr"`
	Epoch       int64  `json:"epoch"`
	State       string `json:"state"`
	UpdatedAtMs int64  `json:"updated_at_ms"`
	// WaitMs, on a released record, is how long the next owner waits
	// before answering (0: at once). Set when a claim found the store's
	// epoch above ZooKeeper's (a wiped or restored ensemble): the owner
	// before the loss is unknown and may still answer for one lease.
	WaitMs int64 `json:"wait_ms,omitempty"`
}

func (r shardRecord) owned() bool { return r.State == StateOwned && r.Owner != "" }

// shardView is the last shards/NN read or written by this node.
type shardView struct {
	ok      bool
	rec     shardRecord
	version int32
}

// Stats are the coordinator's counters, for metrics.
type Stats struct {
	ID          string
	ShardsOwned int
	LiveNodes   int // live nodes as this node sees them, itself included
	// Takeovers counts shards this node took (any previous state),
	// Handoffs the planned hand-offs it made, Lost the shards it lost
	// (taken over, or its lease ran out).
	Takeovers, Handoffs, Lost uint64
	AcquireFailures           uint64
	CASConflicts              uint64
	LeaseRenewals             uint64
	LeaseRenewFailures        uint64
	// LeaseLapses counts the times the lease ran out with shards owned.
	LeaseLapses uint64
	// Fenced counts the held shards given up because the store refused
	// their epoch (Coordinator.Fenced).
	Fenced uint64
	// The store-held lease (storelease.go): renewals in the store and
	// their failures; StoreCarried counts the store renewals that
	// extended the lease while ZooKeeper renewals failed (the lease ran
	// on the store); TakeoversDeferred counts takeover decisions put off
	// because the owner renews through the store.
	StoreRenewals, StoreRenewFailures, StoreCarried, TakeoversDeferred uint64
	ValidUntil                                                         time.Time
}

// Coordinator is the ZooKeeper ordered.Coordinator.
type Coordinator struct {
	cfg       Config
	log       *zap.Logger
	conn      ZK
	sess      *zksession.Session // nil: a bare client (unit tests)
	ownsSess  bool
	acl       []zk.ACL
	base      string // /<root>/<cluster>/ordered
	nodesDir  string
	shardsDir string
	pid       int
	started   time.Time // wall clock, for nodes/<id>

	// staleAfter: a foreign id whose znode has not changed for this long
	// is stale (Lease; Lease/2 with UnsafeNoLeaseWait).
	staleAfter time.Duration

	kick      chan struct{} // wakes the reconcile loop
	renewKick chan struct{} // wakes the renewer
	stopRound chan struct{} // stops the reconcile loop
	stopRenew chan struct{} // stops the renewer
	stopAll   chan struct{} // stops the watch kickers
	roundDone chan struct{}
	renewDone chan struct{}
	drainDone chan struct{} // closed by watchSession on exit

	// sum: the shards taken and handed off, logged once per burst.
	sum summary

	takeovers, handoffs, lost, acquireFails, conflicts atomic.Uint64
	renewals, renewFails, lapses                       atomic.Uint64
	fencedDrops                                        atomic.Uint64
	// The store-held lease (storelease.go): renewals in the store and
	// their failures, the extensions made while ZooKeeper renewals
	// failed, and the takeover decisions deferred because the owner
	// renews through the store.
	storeRenewals, storeRenewFails, storeCarried, storeHeld atomic.Uint64
	storeLease                                              atomic.Bool // lh != nil (published in nodes/<id>)

	mu sync.Mutex
	h  ordered.Handler
	// lh is h when its store holds leases (set by Start, then fixed).
	lh ordered.LeaseHandler
	// acquiring counts Handler.Acquire calls in flight, acqGen changes
	// at each start and end of one: a store renewal that overlapped one
	// extends nothing (storelease.go).
	acquiring int
	acqGen    uint64
	// storePeersOK: every node of the last nodes/ listing advertised
	// store leases; zkFailing: the last ZooKeeper renewal failed; onStore:
	// the lease was last carried by the store (logged once per episode).
	storePeersOK, zkFailing, onStore bool
	// storeUnsafe: the last look at Config.StoreSafe said a failover can
	// lose writes (logged when it changes).
	storeUnsafe bool
	running     bool // reconcile loop started (Start)
	renewing    bool // renewer started
	closed      bool
	id          string
	nodeOK      bool      // nodes/<id> exists as far as this node knows
	validUn     time.Time // ValidUntil
	// validUnWall is ValidUntilWall.
	validUnWall time.Time
	lastSend    time.Time // send time of the last renewal that extended the lease
	// term changes whenever the lease is broken (a lapse, a new znode):
	// a takeover checks it did not change while it ran.
	term   uint64
	lapsed bool // the lease ran out with shards held: Lost is due
	// retired: this node's earlier ids (their znode is gone) with the end
	// of their lease.
	retired  map[string]time.Time
	held     map[int]int64 // shards granted to the handler: epoch
	view     [Shards]shardView
	onChange []func()
	live     int

	// The reconcile goroutine's own state (and Close's, after it stopped).
	peers   map[string]*peer
	warned  map[string]bool // ids warned about (same address as this node)
	backoff [Shards]backoff
	closing atomic.Bool // Close has begun (published in nodes/<id>)
	// epochFloor is the highest epoch a store claim reported per shard
	// (FencedError.Stored): releases carry it, so a coordinator whose
	// ZooKeeper record restarted below the store catches up. Guarded by mu.
	epochFloor [Shards]int64
	// storeAhead is set, per shard, when a claim was refused by the store
	// (FencedError): the store knows an owner at an epoch ZooKeeper's
	// record does not cover (Stored above the grant, or equal to it but
	// another owner's: a wiped or restored ensemble handed the same
	// epoch out twice). That owner may still answer from memory for one
	// lease, so the release carries a lease wait. Also set by a hand-off
	// without its exact write-back (markUnclean). Cleared once the
	// release is written. Guarded by mu.
	storeAhead [Shards]bool
	// restoreUntil: a takeover by this node serves no earlier than this
	// (the restore rule): ZooKeeper was wiped or restored, so its records
	// no longer say who may still answer from memory; one lease from the
	// detection on, every such owner has seen the change or stopped.
	// Guarded by mu.
	restoreUntil time.Time
	// wait is, per shard, the latest NotBefore this node computed for
	// it: until then an earlier owner may still answer, so this node
	// neither writes the shard released (which would let the next owner
	// serve at once) nor grants it earlier.
	wait       [Shards]time.Time
	shardWatch [Shards]<-chan zk.Event
	dirty      [Shards]atomic.Bool
	nodesWatch <-chan zk.Event
	lastFull   time.Time
	published  []ordered.Owner
	// nonces: every shard's store lease nonce as last read (pollNonces);
	// heldNoted: a deferred takeover of the shard was logged and it has
	// not been ready since.
	nonces    [Shards]nonceObs
	heldNoted [Shards]bool
	storeDone chan struct{} // closed by the store renewer on exit (nil: none)
}

var _ ordered.Coordinator = (*Coordinator)(nil)

// Open takes the node's ZooKeeper session (Config.Session, or its own),
// waits for it to be usable (bounded by ctx), creates the layout with the
// ACL of Config.Auth and this node's nodes/<id>, and starts renewing the
// lease. Start makes it take part in the ownership of the shards.
//
// The session manager replaces a client ZooKeeper will never take back
// (a wiped ensemble refuses its handshakes forever: issue 29 hole l) and
// reports wipes and restores; the coordinator applies the restore rule
// (restored) and re-creates its layout and znode on the new session.
func Open(ctx context.Context, cfg Config) (*Coordinator, error) {
	if len(cfg.Servers) == 0 && cfg.Session == nil {
		return nil, errors.New("zkown: Config.Servers is empty and no Config.Session given")
	}
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	sess, owns := cfg.Session, false
	if sess == nil {
		var err error
		if sess, err = openSession(ctx, cfg); err != nil {
			return nil, err
		}
		owns = true
	} else if err := sess.Wait(ctx); err != nil {
		return nil, fmt.Errorf("zkown: %w", err)
	}
	base := sess.View()
	c, err := newCoordinator(ctx, cfg, usableConn{ZK: sess.Conn(), s: sess})
	if err != nil {
		if owns {
			sess.Close()
		}
		return nil, err
	}
	c.sess, c.ownsSess = sess, owns
	if base.Restores > 0 {
		// This process starts after a wipe or restore its session saw:
		// owners of before it may still answer from memory for a lease.
		c.mu.Lock()
		c.restoreUntil = c.cfg.Clock.Now().Add(c.cfg.Lease + c.cfg.LeaseMargin)
		c.mu.Unlock()
	}
	c.drainDone = make(chan struct{})
	go c.watchSession(base)
	c.startRenewer()
	return c, nil
}

// newCoordinator creates the layout and nodes/<id> through conn; no
// goroutine runs yet.
func newCoordinator(ctx context.Context, cfg Config, conn ZK) (*Coordinator, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	acl, err := cluster.ACL(cfg.Auth)
	if err != nil {
		return nil, fmt.Errorf("zkown: Auth: %w", err)
	}
	base := path.Join(cluster.Path(cfg.Root, cfg.Cluster), "ordered")
	c := &Coordinator{
		cfg: cfg, log: cfg.Logger.With(zap.String("self", cfg.Self)), conn: conn, acl: acl,
		base: base, nodesDir: path.Join(base, "nodes"), shardsDir: path.Join(base, "shards"),
		pid: cfg.pid, started: time.Now(), staleAfter: cfg.Lease,
		kick: make(chan struct{}, 1), renewKick: make(chan struct{}, 1),
		stopRound: make(chan struct{}), stopRenew: make(chan struct{}), stopAll: make(chan struct{}),
		roundDone: make(chan struct{}), renewDone: make(chan struct{}),
		retired: map[string]time.Time{}, held: map[int]int64{}, peers: map[string]*peer{}, warned: map[string]bool{},
	}
	c.storeLease.Store(cfg.StoreLease)
	if cfg.UnsafeNoLeaseWait {
		c.staleAfter = cfg.Lease / 2
		c.log.Error("ORDERED lease wait switched OFF (UnsafeNoLeaseWait): a new shard owner serves at once and a node is taken over after one missed renewal; " +
			"two owners may answer for the same shard. Fault injection's negative control only")
	}
	for _, p := range []string{c.nodesDir, c.shardsDir} {
		err := c.call(ctx, cfg.Timeout, func() error { return cluster.EnsurePath(conn, p, acl) })
		if err != nil {
			return nil, fmt.Errorf("zkown: create %s: %w", p, err)
		}
	}
	c.mu.Lock()
	c.id = newID(cfg.Self)
	c.mu.Unlock()
	if err := c.createNode(ctx); err != nil {
		return nil, fmt.Errorf("zkown: create this node's znode under %s: %w", c.nodesDir, err)
	}
	c.log.Info("ORDERED coordinator joined", zap.String("id", c.ID()), zap.Duration("lease", cfg.Lease),
		zap.Duration("lease_margin", cfg.LeaseMargin))
	return c, nil
}

// newID returns a fresh id for addr: the address and a random suffix.
func newID(addr string) string {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		binary.BigEndian.PutUint64(b[:], uint64(time.Now().UnixNano()))
	}
	return strings.ReplaceAll(addr, "/", "_") + "-" + hex.EncodeToString(b[:])
}

// ID is this node's current id (its znode under nodes/).
func (c *Coordinator) ID() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.id
}

// Start begins taking part in the ownership of the shards: the
// coordinator calls h as shards are gained and lost, from its round
// goroutine, except that a round's takeovers of distinct shards call
// Acquire (and Lost on a failed one) several at once (parallel.go).
func (c *Coordinator) Start(ctx context.Context, h ordered.Handler) error {
	if err := c.attach(h); err != nil {
		return err
	}
	c.mu.Lock()
	c.running = true
	lh := c.lh
	if lh != nil {
		c.storeDone = make(chan struct{})
	}
	c.mu.Unlock()
	if lh != nil {
		c.startStoreRenewer()
		c.log.Info("ORDERED lease is renewed in the store too: a ZooKeeper outage does not stop ORDERED while MySQL answers")
	}
	go c.roundLoop()
	return nil
}

// attach sets the handler (Start without the loop: tests step rounds).
func (c *Coordinator) attach(h ordered.Handler) error {
	if h == nil {
		return errors.New("zkown: Start: nil handler")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return errors.New("zkown: Start after Close")
	case c.h != nil:
		return errors.New("zkown: Start called twice")
	}
	lh := leaseHandler(h)
	if lh == nil && c.cfg.StoreLease {
		return errors.New("zkown: Config.StoreLease is set but the handler's store holds no leases (not an ordered.LeaseHandler on a LeaseStore)")
	}
	c.h, c.lh = h, lh
	if c.lh != nil {
		// Published with the next renewal (woken now): until then the
		// peers do not count on this node respecting store leases.
		c.storeLease.Store(true)
		wake(c.renewKick)
	}
	return nil
}

// Owner returns the shard's owner as last seen.
func (c *Coordinator) Owner(shard int) ordered.Owner {
	if shard < 0 || shard >= Shards {
		return ordered.Owner{Shard: shard}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.ownerLocked(shard)
}

func (c *Coordinator) ownerLocked(s int) ordered.Owner {
	v := c.view[s]
	o := ordered.Owner{Shard: s, Epoch: v.rec.Epoch}
	if v.ok && v.rec.owned() {
		o.Addr = v.rec.Addr
	}
	if e, ok := c.held[s]; ok {
		o.Self, o.Addr, o.Epoch = true, c.cfg.Self, e
	}
	return o
}

// Owners returns every shard's owner as last seen (the client's map).
func (c *Coordinator) Owners() []ordered.Owner {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]ordered.Owner, Shards)
	for s := range out {
		out[s] = c.ownerLocked(s)
	}
	return out
}

// ValidUntil is the end of this node's lease (zero after Close).
func (c *Coordinator) ValidUntil() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.validUn
}

// ValidUntilWall implements ordered.Coordinator: the lease's end on the
// wall clock, from the wall time each renewal was sent.
func (c *Coordinator) ValidUntilWall() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.validUnWall
}

// OnChange registers f, called (from the coordinator's goroutine) after
// the owners returned by Owners changed.
func (c *Coordinator) OnChange(f func()) {
	c.mu.Lock()
	c.onChange = append(c.onChange, f)
	c.mu.Unlock()
}

// Fenced implements ordered.Coordinator: the handler dropped the shard
// because the store refused its epoch. The shard is no longer held, so
// the next round claims it again above the store's epoch (when it is
// desired here) or releases it, with a lease wait either way: the owner
// that fenced this node is one ZooKeeper does not know of, and it may
// answer from memory meanwhile.
func (c *Coordinator) Fenced(shard int, epoch int64) {
	if shard < 0 || shard >= Shards {
		return
	}
	c.mu.Lock()
	e, ok := c.held[shard]
	current := ok && e == epoch // else an older term's report: the shard changed hands since
	if current {
		delete(c.held, shard)
		c.storeAhead[shard] = true
	}
	c.mu.Unlock()
	if !current {
		return
	}
	c.fencedDrops.Add(1)
	c.dirty[shard].Store(true)
	c.log.Warn("ORDERED shard fenced by the store (a newer epoch there, not in ZooKeeper); giving its lease up",
		zap.Int("shard", shard), zap.Int64("epoch", epoch))
	wake(c.kick)
}

// Stats returns the counters.
func (c *Coordinator) Stats() Stats {
	c.mu.Lock()
	st := Stats{ID: c.id, ShardsOwned: len(c.held), ValidUntil: c.validUn, LiveNodes: c.live}
	c.mu.Unlock()
	st.Takeovers, st.Handoffs, st.Lost = c.takeovers.Load(), c.handoffs.Load(), c.lost.Load()
	st.AcquireFailures, st.CASConflicts = c.acquireFails.Load(), c.conflicts.Load()
	st.LeaseRenewals, st.LeaseRenewFailures, st.LeaseLapses = c.renewals.Load(), c.renewFails.Load(), c.lapses.Load()
	st.Fenced = c.fencedDrops.Load()
	st.StoreRenewals, st.StoreRenewFailures = c.storeRenewals.Load(), c.storeRenewFails.Load()
	st.StoreCarried, st.TakeoversDeferred = c.storeCarried.Load(), c.storeHeld.Load()
	return st
}

// Close stops reconciling, hands every owned shard off (Handler.Release,
// then the znode is released), bounded by ctx (shards left when ctx ends
// are dropped with Handler.Lost and taken over after the lease wait),
// deletes nodes/<id> and closes the session.
func (c *Coordinator) Close(ctx context.Context) error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	running, renewing, h := c.running, c.renewing, c.h
	id, nodeOK := c.id, c.nodeOK
	c.mu.Unlock()
	// Say so first: the peers stop counting this node as a desired owner,
	// so they take the shards it releases instead of handing theirs to it.
	c.closing.Store(true)
	if nodeOK {
		if err := c.call(ctx, c.cfg.Timeout, func() error {
			_, err := c.conn.Set(path.Join(c.nodesDir, id), c.nodeData(id), -1)
			return err
		}); err != nil {
			c.log.Info("ORDERED coordinator: marking this node closing failed", zap.Error(err))
		}
	}

	close(c.stopRound)
	if running {
		<-c.roundDone
	}
	// What changed hands before the stop, before the stop's own lines.
	c.sum.flush(c.log, c.cfg.Clock.Now(), c.cfg.Lease, true)
	var first error
	if h != nil {
		first = c.releaseAll(ordered.Leaving(ctx), h)
	}
	close(c.stopRenew)
	if renewing {
		<-c.renewDone
	}
	c.mu.Lock()
	storeDone := c.storeDone
	c.mu.Unlock()
	if storeDone != nil {
		<-storeDone
	}
	c.mu.Lock()
	c.validUn, c.validUnWall = time.Time{}, time.Time{}
	id, nodeOK = c.id, c.nodeOK
	c.nodeOK = false
	c.mu.Unlock()
	if nodeOK {
		err := c.call(ctx, c.cfg.Timeout, func() error { return c.conn.Delete(path.Join(c.nodesDir, id), -1) })
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			c.log.Warn("ORDERED coordinator: deleting this node's znode failed (it goes with the session)", zap.Error(err))
		}
	}
	close(c.stopAll)
	if c.drainDone != nil {
		<-c.drainDone
	}
	if c.ownsSess {
		c.sess.Close()
	}
	c.publish()
	c.log.Info("ORDERED coordinator left", zap.String("id", id))
	return first
}

// releaseAll hands every held shard off (Close).
func (c *Coordinator) releaseAll(ctx context.Context, h ordered.Handler) error {
	c.mu.Lock()
	shards := make([]int, 0, len(c.held))
	for s := range c.held {
		shards = append(shards, s)
	}
	c.mu.Unlock()
	sort.Ints(shards)
	defer c.releaseUnheld(ctx)
	var first error
	for i, s := range shards {
		if ctx.Err() != nil {
			for _, r := range shards[i:] {
				c.drop(h, r)
			}
			c.log.Warn("ORDERED coordinator closing: out of time; the shards left are dropped and taken over after the lease wait",
				zap.Ints("shards", shards[i:]))
			if first == nil {
				first = ctx.Err()
			}
			break
		}
		if err := c.handoff(ctx, h, s); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// releaseUnheld releases the shards this node owns in ZooKeeper without
// serving them (a takeover cut short by Close), once their wait is over.
func (c *Coordinator) releaseUnheld(ctx context.Context) {
	for s := range Shards {
		if ctx.Err() != nil || !c.usable() {
			return
		}
		c.mu.Lock()
		v, id := c.view[s], c.id
		_, held := c.held[s]
		c.mu.Unlock()
		if !held && v.ok && v.rec.owned() && v.rec.Owner == id {
			c.releaseIfWaited(ctx, s, v)
		}
	}
}

// drop forgets a held shard and tells the handler (Lost).
func (c *Coordinator) drop(h ordered.Handler, s int) {
	c.mu.Lock()
	_, ok := c.held[s]
	delete(c.held, s)
	c.mu.Unlock()
	if ok {
		c.lost.Add(1)
		h.Lost(s)
	}
}

// publish calls the OnChange functions when the owners changed since the
// last call.
func (c *Coordinator) publish() {
	now := c.Owners()
	if slices.Equal(now, c.published) {
		return
	}
	c.published = now
	c.mu.Lock()
	fs := append([]func(){}, c.onChange...)
	c.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

func shardPath(dir string, s int) string { return path.Join(dir, fmt.Sprintf("%02d", s)) }

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

func wake(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}
