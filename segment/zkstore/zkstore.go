// Package zkstore keeps businesses in ZooKeeper for clusters that run with
// --zk and no --mysql, so every node of such a cluster sees the same
// businesses.
//
// It deliberately keeps no counters: ReserveSegment and ReserveOrdered
// fail with segment.ErrNoSegments. ZooKeeper is a coordination service; a
// wiped or rolled-back ensemble would silently restart counters (and
// repeat UNORDERED and ORDERED numbers), and ORDERED needs one durable write
// per request, far beyond what an ensemble is sized for. Such a cluster
// serves SNOWFLAKE; the segment channels need --mysql.
//
// Layout: /<root>/<cluster>/biz/<name>, one persistent znode per business
// whose data is JSON a person can read with `zkCli.sh get`. Updates are
// compare-and-set on the znode version, so concurrent updates from two
// nodes both take effect.
package zkstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/cluster/zksession"
	"github.com/idgen/idgen/segment"
)

// Defaults of Config.
const (
	DefaultRoot           = "/idgen"
	DefaultCluster        = "default"
	DefaultSessionTimeout = 10 * time.Second
	DefaultTimeout        = 2 * time.Second
)

// Config configures Open. Servers (or Session) is required; every other
// zero field is a documented default.
type Config struct {
	// Session is the node's ZooKeeper session (package cluster/zksession),
	// shared with its other guards; the store never closes it. nil: the
	// store opens its own from Servers, SessionTimeout and Auth, and
	// closes it.
	Session        *zksession.Session
	Servers        []string
	Root           string // default "/idgen"
	Cluster        string // default "default"
	Auth           string // optional digest "user:password"; the biz subtree gets its ACL
	SessionTimeout time.Duration
	Timeout        time.Duration // bound of one store call (default 2s)
	// NoSegmentsReason is the message of segment.ErrNoSegments refusals.
	NoSegmentsReason string
	Logger           *zap.Logger
}

// Store is a segment.Store holding businesses only.
type Store struct {
	cfg Config
	log *zap.Logger
	dir string // /<root>/<cluster>/biz
	acl []zk.ACL

	sess    *zksession.Session
	ownSess bool // opened by the store, closed by Close

	mu     sync.Mutex
	closed bool
}

var _ segment.Store = (*Store)(nil)

// Open connects to ZooKeeper, or uses Config.Session. It does not wait for
// a session: calls made while ZooKeeper is unreachable fail with
// segment.ErrUnavailable within Config.Timeout (the business cache keeps
// serving what it read before).
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if len(cfg.Servers) == 0 && cfg.Session == nil {
		return nil, fmt.Errorf("zkstore: Config.Servers is empty: give at least one ZooKeeper host:port")
	}
	if cfg.Root == "" {
		cfg.Root = DefaultRoot
	}
	if cfg.Cluster == "" {
		cfg.Cluster = DefaultCluster
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.NoSegmentsReason == "" {
		cfg.NoSegmentsReason = "this cluster runs with --zk and no --mysql: UNORDERED, ORDERED and snowflake fallback need a shared counter store; start every node with --mysql DSN"
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	acl, err := cluster.ACL(cfg.Auth)
	if err != nil {
		return nil, fmt.Errorf("zkstore: Auth: %w", err)
	}
	s := &Store{cfg: cfg, log: cfg.Logger, dir: path.Join(cfg.Root, cfg.Cluster, "biz"), acl: acl, sess: cfg.Session}
	if s.sess == nil {
		// Recovery (a new client after a wipe, the credential on every
		// client) is the session's: one policy for every guard.
		zs, err := zksession.Start(zksession.Config{Servers: cfg.Servers, SessionTimeout: cfg.SessionTimeout, Auth: cfg.Auth,
			Logger: cfg.Logger})
		if err != nil {
			return nil, fmt.Errorf("zkstore: %w: %w", segment.ErrUnavailable, err)
		}
		s.sess, s.ownSess = zs, true
	}
	return s, nil
}

// client returns the session's client once it is usable, waiting at most
// until ctx ends (the call's bound): a call while ZooKeeper is unreachable
// is refused in time, never queued behind a reconnect.
func (s *Store) client(ctx context.Context) (zksession.ZK, error) {
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	if closed {
		return nil, fmt.Errorf("zkstore: %w: store closed", segment.ErrUnavailable)
	}
	for {
		v, ch := s.sess.ViewChanged()
		switch {
		case v.Has:
			return s.sess.Conn(), nil
		case v.Closed:
			return nil, fmt.Errorf("zkstore: %w: ZooKeeper session closed", segment.ErrUnavailable)
		case v.Refused != "":
			return nil, fmt.Errorf("zkstore: %w: %s", segment.ErrUnavailable, v.Refused)
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("zkstore: %w: no ZooKeeper session (%v)", segment.ErrUnavailable, ctx.Err())
		}
	}
}

// call runs op against the current client, bounded by ctx and
// Config.Timeout. The go-zookeeper client has no per-call context: a call
// that outlives the bound is abandoned (it ends with the client's own
// timeouts) and the caller gets segment.ErrUnavailable.
func call[T any](ctx context.Context, s *Store, what string, op func(c zksession.ZK) (T, error)) (T, error) {
	var zero T
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	c, err := s.client(ctx)
	if err != nil {
		return zero, fmt.Errorf("%s: %w", what, err)
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := op(c)
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil && isConnErr(r.err) {
			return zero, fmt.Errorf("zkstore: %s: %w: %v", what, segment.ErrUnavailable, r.err)
		}
		return r.v, r.err
	case <-ctx.Done():
		return zero, fmt.Errorf("zkstore: %s: %w: ZooKeeper did not answer: %v", what, segment.ErrUnavailable, ctx.Err())
	}
}

func isConnErr(err error) bool {
	return errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) || errors.Is(err, zk.ErrClosing) ||
		errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrSessionMoved)
}

// record is a business as stored.
type record struct {
	Name        string   `json:"name"`
	Channel     string   `json:"channel"`
	Step        int64    `json:"step"`
	LowWaterPct int      `json:"low_water_pct"`
	StartNum    int64    `json:"start_num"`
	Fallback    bool     `json:"fallback"`
	RateLimit   int      `json:"rate_limit"`
	IDQuota     int64    `json:"id_quota,omitempty"`
	IDBurst     int64    `json:"id_burst,omitempty"`
	Description string   `json:"description,omitempty"`
	Obfuscate   bool     `json:"obfuscate,omitempty"`
	Format      string   `json:"format,omitempty"`
	CodeMinLen  int      `json:"code_min_length,omitempty"`
	Plugins     []string `json:"plugins,omitempty"`
	Key         []byte   `json:"secret_key,omitempty"`
	Issued      bool     `json:"issued,omitempty"`
	// OrderedMode is gapless or cached; znodes written before it existed
	// have none, which reads as gapless, the default.
	OrderedMode string `json:"ordered_mode,omitempty"`
	// Tokens: znodes written before client tokens existed have none,
	// which reads as a business open to the shared client token, as
	// before.
	Tokens []segment.BizToken `json:"tokens,omitempty"`
	// Channels are channel numbers (custom strategies' included); znodes
	// written before channel lists existed have none, and
	// segment.StoredChannels says what they serve.
	Channels  []int     `json:"channels,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	UpdatedAt time.Time `json:"updated_at"`
}

func encode(b segment.Biz) []byte {
	v, _ := json.Marshal(record{Name: b.Name, Channel: b.Channel.String(), Step: b.Step, LowWaterPct: b.LowWaterPct,
		StartNum: b.StartNum, Fallback: b.Fallback, RateLimit: b.RateLimit,
		IDQuota: b.IDQuota, IDBurst: b.IDBurst, Description: b.Description,
		Obfuscate: b.Obfuscate, Format: b.Format.String(), CodeMinLen: b.CodeMinLength, Plugins: b.Plugins,
		Key: []byte(b.Key), Issued: b.Issued, OrderedMode: b.OrderedMode.String(), Tokens: b.Tokens,
		Channels: channelInts(b.Channels), CreatedAt: b.CreatedAt.UTC(), UpdatedAt: b.UpdatedAt.UTC()})
	return v
}

func channelInts(chs []segment.Channel) []int {
	out := make([]int, len(chs))
	for i, ch := range chs {
		out[i] = int(ch)
	}
	return out
}

func decode(v []byte) (segment.Biz, error) {
	var r record
	if err := json.Unmarshal(v, &r); err != nil {
		return segment.Biz{}, fmt.Errorf("zkstore: business znode is not valid JSON: %w", err)
	}
	ch := segment.ChannelSnowflake
	switch r.Channel {
	case "unordered":
		ch = segment.ChannelUnordered
	case "ordered":
		ch = segment.ChannelOrdered
	}
	format, err := segment.ParseFormat(r.Format)
	if err != nil {
		return segment.Biz{}, fmt.Errorf("zkstore: business znode: %w", err)
	}
	mode, err := segment.ParseOrderedMode(r.OrderedMode)
	if err != nil {
		return segment.Biz{}, fmt.Errorf("zkstore: business znode: %w", err)
	}
	b := segment.Biz{Name: r.Name, Channel: ch, Step: r.Step, LowWaterPct: r.LowWaterPct, StartNum: r.StartNum,
		Fallback: r.Fallback, RateLimit: r.RateLimit, IDQuota: r.IDQuota, IDBurst: r.IDBurst, Description: r.Description,
		Obfuscate: r.Obfuscate, Format: format, CodeMinLength: r.CodeMinLen, Plugins: r.Plugins,
		Key: r.Key, Issued: segment.StoredIssued(r.Issued, r.Key), OrderedMode: mode, Tokens: r.Tokens,
		CreatedAt: r.CreatedAt.UTC(), UpdatedAt: r.UpdatedAt.UTC()}
	var chs []segment.Channel
	for _, c := range r.Channels {
		if c < 0 || c > 127 {
			return segment.Biz{}, fmt.Errorf("zkstore: business znode %q: channel %d in channels: want 0..127 (edited by hand? fix the list)", r.Name, c)
		}
		chs = append(chs, segment.Channel(c))
	}
	b.Channels = segment.StoredChannels(chs, b)
	return b, nil
}

// ensureDir creates /<root>/<cluster>/biz and its parents: the root (all
// of its path) open, since clusters with different credentials share it,
// as cluster.Init and the worker lease create it; the cluster's znode and
// everything below with the cluster's ACL.
func (s *Store) ensureDir(c zksession.ZK) error {
	if ok, _, err := c.Exists(s.dir); err == nil && ok {
		return nil
	}
	clusterPath := path.Join(s.cfg.Root, s.cfg.Cluster)
	cur := ""
	for _, p := range strings.Split(strings.TrimPrefix(s.dir, "/"), "/") {
		cur += "/" + p
		acl := zk.WorldACL(zk.PermAll)
		if len(cur) >= len(clusterPath) {
			acl = s.acl
		}
		if _, err := c.Create(cur, nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("create %s: %w", cur, err)
		}
	}
	return nil
}

// CreateBiz stores b with defaults filled in; ErrBizExists if it exists.
func (s *Store) CreateBiz(ctx context.Context, b segment.Biz) (segment.Biz, error) {
	b, err := segment.NormalizeBiz(b)
	if err != nil {
		return segment.Biz{}, fmt.Errorf("zkstore: create biz: %w", err)
	}
	now := time.Now().UTC()
	b.CreatedAt, b.UpdatedAt = now, now
	p := path.Join(s.dir, b.Name)
	_, err = call(ctx, s, "create biz "+b.Name, func(c zksession.ZK) (struct{}, error) {
		if err := s.ensureDir(c); err != nil {
			return struct{}{}, err
		}
		_, err := c.Create(p, encode(b), 0, s.acl)
		return struct{}{}, err
	})
	if errors.Is(err, zk.ErrNodeExists) {
		return segment.Biz{}, fmt.Errorf("zkstore: create biz %q: %w", b.Name, segment.ErrBizExists)
	}
	if err != nil {
		return segment.Biz{}, fmt.Errorf("zkstore: create biz %q: %w", b.Name, err)
	}
	return b, nil
}

// UpdateBiz applies u with compare-and-set on the znode version, retrying
// when another node changed the business in between.
func (s *Store) UpdateBiz(ctx context.Context, name string, u segment.BizUpdate) (segment.Biz, error) {
	if err := segment.ValidateBizName(name); err != nil {
		return segment.Biz{}, err
	}
	p := path.Join(s.dir, name)
	for attempt := 0; attempt < 20; attempt++ {
		raw, err := call(ctx, s, "read biz "+name, func(c zksession.ZK) (getResult, error) {
			b, st, err := c.Get(p)
			s.noteStat(st)
			return getResult{b, st}, err
		})
		if errors.Is(err, zk.ErrNoNode) {
			return segment.Biz{}, fmt.Errorf("zkstore: update biz %q: %w", name, segment.ErrUnknownBiz)
		}
		if err != nil {
			return segment.Biz{}, err
		}
		cur, err := decode(raw.data)
		if err != nil {
			return segment.Biz{}, err
		}
		next, err := segment.ApplyBizUpdate(cur, u, time.Now().UTC())
		if err != nil {
			return segment.Biz{}, fmt.Errorf("zkstore: update biz %q: %w", name, err)
		}
		_, err = call(ctx, s, "update biz "+name, func(c zksession.ZK) (*zk.Stat, error) {
			st, err := c.Set(p, encode(next), raw.stat.Version)
			s.noteStat(st)
			return st, err
		})
		if errors.Is(err, zk.ErrBadVersion) {
			continue // changed by another node meanwhile: apply u to the new value
		}
		if errors.Is(err, zk.ErrNoNode) {
			return segment.Biz{}, fmt.Errorf("zkstore: update biz %q: %w", name, segment.ErrUnknownBiz)
		}
		if err != nil {
			return segment.Biz{}, err
		}
		return next, nil
	}
	return segment.Biz{}, fmt.Errorf("zkstore: update biz %q: %w: too many concurrent updates, retry", name, segment.ErrUnavailable)
}

// noteStat reports the zxid of an answer to the session (its lost-writes
// rule compares the servers' zxids with the highest one seen).
func (s *Store) noteStat(st *zk.Stat) {
	if st != nil {
		s.sess.NoteZxid(max(st.Mzxid, st.Czxid))
	}
}

type getResult struct {
	data []byte
	stat *zk.Stat
}

// GetBiz reads one business.
func (s *Store) GetBiz(ctx context.Context, name string) (segment.Biz, error) {
	if err := segment.ValidateBizName(name); err != nil {
		return segment.Biz{}, err
	}
	raw, err := call(ctx, s, "read biz "+name, func(c zksession.ZK) (getResult, error) {
		b, st, err := c.Get(path.Join(s.dir, name))
		s.noteStat(st)
		return getResult{b, st}, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return segment.Biz{}, fmt.Errorf("zkstore: %q: %w", name, segment.ErrUnknownBiz)
	}
	if err != nil {
		return segment.Biz{}, err
	}
	return decode(raw.data)
}

// ListBiz lists every business, by name.
func (s *Store) ListBiz(ctx context.Context) ([]segment.Biz, error) {
	names, err := call(ctx, s, "list businesses", func(c zksession.ZK) ([]string, error) {
		n, _, err := c.Children(s.dir)
		return n, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := make([]segment.Biz, 0, len(names))
	for _, n := range names {
		b, err := s.GetBiz(ctx, n)
		if errors.Is(err, segment.ErrUnknownBiz) {
			continue // deleted meanwhile
		}
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

// ReserveSegment is refused: this store keeps no counters.
func (s *Store) ReserveSegment(context.Context, string, int64) (segment.Range, error) {
	return segment.Range{}, fmt.Errorf("%w: %s", segment.ErrNoSegments, s.cfg.NoSegmentsReason)
}

// ReserveOrdered is refused: this store keeps no counters.
func (s *Store) ReserveOrdered(context.Context, segment.OrderedRequest) (segment.Range, error) {
	return segment.Range{}, fmt.Errorf("%w: %s", segment.ErrNoSegments, s.cfg.NoSegmentsReason)
}

// Ping reports whether ZooKeeper answers (readiness).
func (s *Store) Ping(ctx context.Context) error {
	_, err := call(ctx, s, "ping", func(c zksession.ZK) (bool, error) {
		ok, _, err := c.Exists(s.cfg.Root)
		return ok, err
	})
	return err
}

// Close closes the store's own session (a shared one stays open).
func (s *Store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.closed {
		s.closed = true
		if s.ownSess {
			s.sess.Close()
		}
	}
	return nil
}
