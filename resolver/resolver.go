package resolver

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudwego/kitex/pkg/discovery"
	"github.com/cloudwego/kitex/pkg/loadbalance/lbcache"
	"github.com/cloudwego/kitex/pkg/rpcinfo"
	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/internal/secretfile"
	"github.com/idgen/idgen/worker"
)

// Defaults of Config. A zero field means its default.
const (
	DefaultRoot            = worker.DefaultRoot           // "/idgen"
	DefaultCluster         = worker.DefaultCluster        // "default"
	DefaultSessionTimeout  = worker.DefaultSessionTimeout // 10s
	DefaultRefreshInterval = time.Second
)

// Tags every instance carries (discovery.Instance.Tag).
const (
	TagCluster = "cluster" // the cluster name
	TagIDC     = "idc"     // the member's IDC number, decimal
	TagSlot    = "slot"    // the node number it holds, decimal
	TagWorker  = "worker"  // its snowflake worker ID, decimal
	TagVersion = "version" // its software version
	TagMember  = "member"  // its member znode's name, m-<guid>-<seq>
)

// Config of a Resolver. The zero value of every field but ZK means the
// documented default.
type Config struct {
	// ZK is the ZooKeeper ensemble, host:port each. Required.
	ZK []string
	// Cluster is the cluster name. Default "default".
	Cluster string
	// ZKRoot is the ZooKeeper root of the idgen clusters. Default "/idgen".
	ZKRoot string
	// ZKAuth is a digest credential user:password for an ACL-protected
	// cluster. Default none.
	ZKAuth string
	// ZKAuthFile names a file holding ZKAuth instead (the server's
	// --zk-auth-file; the idgen client's Config.ZKAuthFile), read once by
	// New, trimmed, and refused as the server refuses its secret files:
	// empty, or readable or writable by other users (chmod 600). Setting
	// both ZKAuth and ZKAuthFile is refused.
	ZKAuthFile string
	// ZKSessionTimeout is the resolver's own ZooKeeper session timeout;
	// New also waits at most this long for a session. After this long
	// without a session the members it answers with are reported stale
	// (Stale). Default 10s. (How fast a crashed node leaves is the node's
	// session timeout, --zk-session-timeout, not this one.)
	ZKSessionTimeout time.Duration
	// RefreshInterval is the Kitex balancer refresh that CacheOptions
	// returns: how long after the resolver sees a change a Kitex client's
	// balancer sees it. It must be below ZKSessionTimeout. Resolve answers
	// from memory, so a short interval costs nothing. Default 1s.
	RefreshInterval time.Duration
	// Weight is every instance's weight. Default discovery.DefaultWeight.
	Weight int
	// Logger receives joins, leaves and session trouble. nil: no logs.
	Logger *zap.Logger
}

// ErrClosed is returned by Resolve after Close.
var ErrClosed = errors.New("idgen resolver: closed")

// ErrNoMembers is wrapped by the error Resolve returns while the resolver
// has never seen a member of its cluster.
var ErrNoMembers = errors.New("no member of the idgen cluster seen in ZooKeeper")

var resolverSeq atomic.Int64

// Resolver is a Kitex discovery.Resolver over the member znodes of one
// idgen cluster. It is safe for concurrent use; Close it when done (after
// the Kitex clients that use it).
type Resolver struct {
	cfg  Config
	path string // /<root>/<cluster>, also the Target description
	name string
	log  *zap.Logger
	conn *zk.Conn

	snap atomic.Pointer[snapshot] // nil until a non-empty listing

	lostAt    atomic.Int64 // Unix ns since when there is no session; 0 with one
	failingAt atomic.Int64 // Unix ns since when listings fail; 0 when the last one worked
	staleLog  bool         // monitor goroutine only: a stale warning is out

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
}

// snapshot is one listing's answer, immutable once stored.
type snapshot struct {
	members   []worker.Member      // deduplicated by address, sorted by address
	instances []discovery.Instance // same order
}

var _ discovery.Resolver = (*Resolver)(nil)

// New connects to ZooKeeper, lists the cluster's members once (so the
// first Resolve has them) and keeps watching them until Close. It fails
// when ZooKeeper gives no session within ZKSessionTimeout or refuses the
// listing (e.g. an ACL without ZKAuth); a cluster that does not exist yet
// or has no member is no error here: Resolve reports it until members
// appear.
func New(cfg Config) (*Resolver, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = zap.NewNop()
	}
	r := &Resolver{cfg: cfg, path: cluster.Path(cfg.ZKRoot, cfg.Cluster)}
	r.log = log.With(zap.String("cluster", r.path))
	r.name = fmt.Sprintf("idgen-zk:%s#%d", r.path, resolverSeq.Add(1))
	r.ctx, r.cancel = context.WithCancel(context.Background())

	dctx, dcancel := context.WithTimeout(r.ctx, cfg.ZKSessionTimeout)
	defer dcancel()
	conn, err := worker.DialZK(dctx, cfg.ZK, cfg.ZKSessionTimeout, cfg.ZKAuth, log)
	if err != nil {
		r.cancel()
		return nil, fmt.Errorf("idgen resolver: ZooKeeper %s: %w", strings.Join(cfg.ZK, ","), err)
	}
	r.conn = conn
	ms, watches, err := worker.ListMembers(conn, cfg.ZKRoot, cfg.Cluster)
	if err != nil {
		r.cancel()
		conn.Close()
		if errors.Is(err, zk.ErrNoAuth) {
			return nil, fmt.Errorf("idgen resolver: %w (the cluster's znodes are ACL-protected: set Config.ZKAuthFile, or ZKAuth, to the digest credential user:password the nodes use)", err)
		}
		return nil, fmt.Errorf("idgen resolver: %w", err)
	}
	r.update(ms, nil)
	if r.snap.Load() == nil {
		r.log.Warn("idgen resolver: no member of the cluster in ZooKeeper yet: Resolve fails until one appears")
	}
	r.wg.Add(2)
	go func() {
		defer r.wg.Done()
		worker.WatchMembers(r.ctx, conn, cfg.ZKRoot, cfg.Cluster, watches, r.update)
	}()
	go func() {
		defer r.wg.Done()
		r.monitor()
	}()
	return r, nil
}

func (cfg *Config) fill() error {
	if len(cfg.ZK) == 0 {
		return errors.New("idgen resolver: Config.ZK is required (the ZooKeeper ensemble, host:port each)")
	}
	if err := secretfile.Fill(&cfg.ZKAuth, cfg.ZKAuthFile, "Config.ZKAuth", "Config.ZKAuthFile"); err != nil {
		return fmt.Errorf("idgen resolver: %w", err)
	}
	if cfg.Cluster == "" {
		cfg.Cluster = DefaultCluster
	}
	if strings.ContainsAny(cfg.Cluster, "/\x00") {
		return fmt.Errorf("idgen resolver: Config.Cluster %q must be a name without '/'", cfg.Cluster)
	}
	if cfg.ZKRoot == "" {
		cfg.ZKRoot = DefaultRoot
	}
	if !strings.HasPrefix(cfg.ZKRoot, "/") {
		return fmt.Errorf("idgen resolver: Config.ZKRoot %q is not an absolute ZooKeeper path like /idgen", cfg.ZKRoot)
	}
	if cfg.ZKRoot != "/" {
		cfg.ZKRoot = strings.TrimSuffix(cfg.ZKRoot, "/")
	}
	if cfg.ZKSessionTimeout <= 0 {
		cfg.ZKSessionTimeout = DefaultSessionTimeout
	}
	if cfg.RefreshInterval <= 0 {
		cfg.RefreshInterval = min(DefaultRefreshInterval, cfg.ZKSessionTimeout/2)
	}
	if cfg.RefreshInterval >= cfg.ZKSessionTimeout {
		return fmt.Errorf("idgen resolver: Config.RefreshInterval %v must be below ZKSessionTimeout %v, or a node's leave reaches the balancer later than a session timeout",
			cfg.RefreshInterval, cfg.ZKSessionTimeout)
	}
	if cfg.Weight <= 0 {
		cfg.Weight = discovery.DefaultWeight
	}
	return nil
}

// Target implements discovery.Resolver: the cluster's path
// (/<root>/<cluster>). A Resolver serves one cluster, so the target's
// service name does not matter.
func (r *Resolver) Target(context.Context, rpcinfo.EndpointInfo) string { return r.path }

// Resolve implements discovery.Resolver from memory: the members of the
// last listing that showed any. It fails (wrapping ErrNoMembers) while the
// resolver has never seen a member, and with ErrClosed after Close.
//
// Like the idgen client, it keeps answering with the last known members
// while ZooKeeper is unreachable and when a listing shows no member at all
// (see the package doc); Stale reports when that answer may be out of
// date.
func (r *Resolver) Resolve(_ context.Context, desc string) (discovery.Result, error) {
	if r.closed.Load() {
		return discovery.Result{}, ErrClosed
	}
	s := r.snap.Load()
	if s == nil {
		return discovery.Result{}, fmt.Errorf("idgen resolver: %w: %s has no member in ZooKeeper %s (is the cluster initialised, with --cluster %s and --zk-root %s, and a node running?)",
			ErrNoMembers, r.path, strings.Join(r.cfg.ZK, ","), r.cfg.Cluster, r.cfg.ZKRoot)
	}
	return discovery.Result{Cacheable: true, CacheKey: desc, Instances: slices.Clone(s.instances)}, nil
}

// Diff implements discovery.Resolver with discovery.DefaultDiff.
func (r *Resolver) Diff(cacheKey string, prev, next discovery.Result) (discovery.Change, bool) {
	return discovery.DefaultDiff(cacheKey, prev, next)
}

// Name implements discovery.Resolver. It is unique to this Resolver:
// Kitex shares balancer factories process-wide by resolver name, and a
// name shared with an earlier, closed Resolver would make a new client
// resolve through the closed one.
func (r *Resolver) Name() string { return r.name }

// CacheOptions returns the Kitex load-balancer cache options to pass to
// client.WithLoadBalancer beside this resolver: RefreshInterval is
// Config.RefreshInterval, so a member that leaves is out of the balancer
// at most that long after its znode goes (Kitex's own default is 5s), and
// the factory is shared by the clients of this resolver (Cacheable).
//
//	client.WithResolver(r),
//	client.WithLoadBalancer(loadbalance.NewWeightedBalancer(), r.CacheOptions()),
func (r *Resolver) CacheOptions() *lbcache.Options {
	return &lbcache.Options{RefreshInterval: r.cfg.RefreshInterval, Cacheable: true}
}

// Members returns the members Resolve answers with (nil before the first
// one was seen), deduplicated by address, sorted by address.
func (r *Resolver) Members() []worker.Member {
	if s := r.snap.Load(); s != nil {
		return slices.Clone(s.members)
	}
	return nil
}

// Stale reports whether the members Resolve answers with may be out of
// date: the resolver has had no ZooKeeper session, or its listings have
// failed, for longer than ZKSessionTimeout (its session is then surely
// expired, and joins and leaves since are unseen). It goes back to false
// once a listing works again.
func (r *Resolver) Stale() bool { return r.staleAt(time.Now()) }

func (r *Resolver) staleAt(now time.Time) bool {
	over := func(since int64) bool {
		return since != 0 && now.Sub(time.Unix(0, since)) > r.cfg.ZKSessionTimeout
	}
	lost := r.lostAt.Load()
	if r.conn.State() == zk.StateHasSession {
		lost = 0
	}
	return over(lost) || over(r.failingAt.Load())
}

// Close stops watching and closes the ZooKeeper session. Resolve fails
// with ErrClosed afterwards (a Kitex balancer keeps its last result on a
// failed refresh). Close is idempotent.
func (r *Resolver) Close() error {
	if r.closed.Swap(true) {
		return nil
	}
	r.cancel()
	// The connection first: a listing waiting for a ZooKeeper that is
	// unreachable returns only when its request fails.
	r.conn.Close()
	r.wg.Wait()
	return nil
}

// update takes one listing's result (WatchMembers' callback, and New's
// first listing).
func (r *Resolver) update(ms []worker.Member, err error) {
	now := time.Now()
	if err != nil {
		if r.failingAt.CompareAndSwap(0, now.UnixNano()) {
			r.log.Warn("idgen resolver: listing the members failed: keeping the last known ones, retrying every second",
				zap.Error(err), zap.Int("members", len(r.Members())))
		}
		return
	}
	if since := r.failingAt.Swap(0); since != 0 {
		r.log.Info("idgen resolver: listing the members works again", zap.Duration("after", now.Sub(time.Unix(0, since))))
	}
	prev := r.snap.Load()
	if len(ms) == 0 {
		if prev != nil {
			// The idgen client's rule: every member gone at once is more
			// likely a ZooKeeper hiccup than a dead cluster.
			r.log.Warn("idgen resolver: ZooKeeper lists no member: keeping the last known ones",
				zap.Int("members", len(prev.members)))
		}
		return
	}
	next := r.snapshotOf(ms)
	r.snap.Store(next)
	joined, left := diffAddrs(prev, next)
	if len(joined)+len(left) > 0 {
		r.log.Info("idgen resolver: members changed", zap.Strings("joined", joined), zap.Strings("left", left),
			zap.Int("members", len(next.members)))
	}
}

// snapshotOf builds the instances of ms, one per address. A restarted node
// can be listed twice until its old session ends (old and new member
// znode, same address): the most recently started one is kept.
func (r *Resolver) snapshotOf(ms []worker.Member) *snapshot {
	s := &snapshot{}
	for _, m := range ms { // sorted by address
		if n := len(s.members); n > 0 && s.members[n-1].Addr() == m.Addr() {
			if newer(m, s.members[n-1]) {
				s.members[n-1] = m
			}
			continue
		}
		s.members = append(s.members, m)
	}
	for _, m := range s.members {
		s.instances = append(s.instances, discovery.NewInstance("tcp", m.Addr(), r.cfg.Weight, map[string]string{
			TagCluster: r.cfg.Cluster,
			TagIDC:     strconv.Itoa(m.IDC),
			TagSlot:    strconv.Itoa(m.Slot),
			TagWorker:  strconv.Itoa(m.Worker),
			TagVersion: m.Version,
			TagMember:  m.Name,
		}))
	}
	return s
}

// newer reports whether a started after b (by start time, then by the
// member znode's sequence number).
func newer(a, b worker.Member) bool {
	if !a.StartedAt.Equal(b.StartedAt) {
		return a.StartedAt.After(b.StartedAt)
	}
	return memberSeq(a.Name) > memberSeq(b.Name)
}

func memberSeq(name string) int64 {
	i := strings.LastIndexByte(name, '-')
	n, _ := strconv.ParseInt(name[i+1:], 10, 64)
	return n
}

func diffAddrs(prev, next *snapshot) (joined, left []string) {
	had := map[string]bool{}
	if prev != nil {
		for _, m := range prev.members {
			had[m.Addr()] = true
		}
	}
	for _, m := range next.members {
		if !had[m.Addr()] {
			joined = append(joined, m.Addr())
		}
		delete(had, m.Addr())
	}
	for a := range had {
		left = append(left, a)
	}
	slices.Sort(left)
	return joined, left
}

// monitor follows the session state, so that Stale knows since when there
// is none, and logs when the answer turns stale and fresh again.
func (r *Resolver) monitor() {
	every := min(max(r.cfg.ZKSessionTimeout/20, 50*time.Millisecond), 500*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-r.ctx.Done():
			return
		case now := <-t.C:
			r.checkSession(now)
		}
	}
}

func (r *Resolver) checkSession(now time.Time) {
	if r.conn.State() == zk.StateHasSession {
		r.lostAt.Store(0)
	} else {
		r.lostAt.CompareAndSwap(0, now.UnixNano())
	}
	stale := r.staleAt(now)
	switch {
	case stale && !r.staleLog:
		r.staleLog = true
		r.log.Warn("idgen resolver: no ZooKeeper session or listing for longer than the session timeout: answering with the last known members, which may be stale",
			zap.Duration("session_timeout", r.cfg.ZKSessionTimeout), zap.Int("members", len(r.Members())))
	case !stale && r.staleLog:
		r.staleLog = false
		r.log.Info("idgen resolver: ZooKeeper session back: members are current again", zap.Int("members", len(r.Members())))
	}
}
