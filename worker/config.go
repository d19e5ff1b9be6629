package worker

import (
	"context"
	"fmt"
	"net"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/idgen/idgen/clock"
	"github.com/idgen/idgen/cluster/zksession"
)

// Defaults of Config and StandaloneConfig. A zero field means its default.
const (
	DefaultRoot            = "/idgen"
	DefaultCluster         = "default"
	DefaultApp             = "idgen"
	DefaultPort            = 8888
	DefaultPropertiesDir   = "./data"
	DefaultSessionTimeout  = 10 * time.Second
	DefaultHighWaterMargin = 2 * time.Second
	DefaultOutageTolerance = 30 * time.Second
	// DefaultMaxStartWait bounds the wait for a slot's mark that a node
	// accepts at start; it covers the lead of a ZooKeeper mark
	// (heartbeat + outage tolerance + margin) with room to spare, so only a
	// clock far behind its peers is refused.
	DefaultMaxStartWait     = DefaultOutageTolerance + 20*time.Second
	DefaultMaxPeerClockSkew = time.Second
	DefaultPeerClockTimeout = 500 * time.Millisecond
	DefaultIDCBits          = 2
	DefaultNodeBits         = 8
	// WorkerBits is the width of the worker field of a snowflake ID
	// (DESIGN.md, "Snowflake layout"): IDCBits + NodeBits must equal it.
	WorkerBits = 10
)

// DefaultEpochMs is the default snowflake epoch, 2020-01-01T00:00:00Z.
var DefaultEpochMs = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli()

// ConnectFunc opens a ZooKeeper client (see zksession.ConnectFunc).
type ConnectFunc = zksession.ConnectFunc

// PeerClockFunc asks the idgen node at host:port for its wall clock (Unix
// milliseconds), typically with the Clock() RPC.
type PeerClockFunc func(ctx context.Context, host string, port int) (int64, error)

// Config configures Register. The zero value of every field but Servers,
// Holder and (in most deployments) IDC is a documented default.
type Config struct {
	// Servers is the ZooKeeper ensemble, "host:port" each. Required.
	Servers []string
	// Root is the ZooKeeper path under which clusters live. Default "/idgen".
	Root string
	// Cluster names this cluster's subtree /<Root>/<Cluster>. Default "default".
	Cluster string
	// IDC is this node's data center number, 0 <= IDC < 1<<Meta.IDCBits.
	IDC int
	// App, Port and Host name the properties file <App>:<Port>:<Host>.properties;
	// Host and Port are also published in the member znode so that peers and
	// operators can reach the node. Defaults: "idgen", 8888, and the first
	// non-loopback IPv4 address of the host (127.0.0.1 if there is none).
	App  string
	Host string
	Port int
	// PropertiesDir holds the properties file that caches the slot and its
	// high-water mark across restarts (rule 4). Default "./data".
	PropertiesDir string
	// Meta is the desired cluster configuration. A node that creates the
	// cluster stores it (with CreatedMs = now); every other node compares it
	// with the stored one and refuses to start on a difference. Zero fields
	// mean EpochMs = 2020-01-01T00:00:00Z, IDCBits = 2, NodeBits = 8.
	// CreatedMs is ignored: it belongs to whoever creates the cluster.
	Meta Meta
	// SessionTimeout is the ZooKeeper session timeout. Default 10s.
	SessionTimeout time.Duration
	// FenceAfter is ignored. It once fenced the holder after a connection
	// loss, which cannot stop a paused or partitioned node in time anyway;
	// what keeps IDs unique is the durable high-water mark (see the package
	// doc), and with it a disconnected node keeps serving up to its mark.
	//
	// Deprecated: see OutageTolerance.
	FenceAfter time.Duration
	// OutageTolerance is how long the holder keeps serving while ZooKeeper
	// is unreachable: every mark is written this far ahead (plus
	// HeartbeatInterval and HighWaterMargin, see Lead). The cost: a slot
	// whose holder crashed is free for a new holder only after about Lead;
	// a crash-restarted node takes another slot whose mark has passed, and
	// a brand-new cluster's first nodes wait one Lead. Default 30s; 0 means
	// the default, a negative value no tolerance.
	OutageTolerance time.Duration
	// HeartbeatInterval is how often the high-water mark is written ahead.
	// Default DefaultHeartbeatInterval (3s).
	HeartbeatInterval time.Duration
	// HighWaterMargin is added to now + HeartbeatInterval when the mark is
	// written, so a slightly late heartbeat does not stall the holder. It is
	// also the upper bound of the extra wait of a node that takes over the
	// slot after a crash. Default 2s.
	HighWaterMargin time.Duration
	// MaxStartWait: a node that would have to wait longer than this for its
	// clock to pass the slot's high-water mark refuses to start. Default 10s.
	MaxStartWait time.Duration
	// ConnectTimeout is how long Register waits for a ZooKeeper session
	// before treating ZooKeeper as unreachable. Default SessionTimeout.
	ConnectTimeout time.Duration
	// AllowCachedSlotWithoutZK lets a node whose ZooKeeper is unreachable at
	// start serve with the slot cached in its properties file (degraded
	// mode), but only where no other node can have taken the slot: above
	// the cached mark (what the last run may have used) and before the
	// last run's claim can expire (a session timeout after ZooKeeper last
	// confirmed a mark, less HighWaterMargin and MaxPeerClockSkew). After a
	// crash that window is empty unless Lead is shorter than the session
	// timeout, so the start is refused then, with the figures; after a
	// clean shutdown the slot was released and is refused too. nil means
	// false (issue 17 item 3: the old default served a slot another node
	// had taken).
	AllowCachedSlotWithoutZK *bool
	// MaxPeerClockSkew: a node whose clock differs from the median of its
	// peers' clocks by more than this refuses to start. Default 1s.
	MaxPeerClockSkew time.Duration
	// PeerClock asks a peer for its clock; nil skips the peer clock check.
	PeerClock PeerClockFunc
	// PeerClockTimeout bounds each peer's answer; a slower peer is skipped.
	// Default 500ms.
	PeerClockTimeout time.Duration
	// Auth is an optional ZooKeeper digest credential "user:password". When
	// set, the cluster subtree is created with a digest ACL for that user
	// only. It is never logged.
	Auth string
	// Session is the node's ZooKeeper session (package
	// cluster/zksession), shared with the node's other guards; the lease
	// never closes it. nil: the lease opens its own from Servers,
	// SessionTimeout, Auth, ServerStats and Connect, and closes it.
	Session *zksession.Session
	// ServerStats asks the servers for their mode and zxid when they keep
	// refusing the client's handshakes (see zksession). nil: the srvr
	// four-letter word. Tests pass a fake here. Unused with Session.
	ServerStats ServerStatsFunc
	// Connect opens the ZooKeeper client. nil: the go-zookeeper client.
	// Tests pass a fake here. Unused with Session.
	Connect ConnectFunc
	// Clock is the wall clock that high-water marks are read from; it must
	// be the clock the holder issues IDs with. nil: clock.System.
	Clock clock.Clock
	// Logger receives the lease's logs. nil: no logs.
	Logger *zap.Logger
	// AfterClaim runs after every slot claim of the ZooKeeper lease (at
	// start, at each re-claim after the session expired, and when a slot
	// used from the cache is promoted to a claim), once the claim and its
	// mark are written and before the holder serves from the slot. The
	// server touches the cluster incarnation here (cluster/incarnation
	// Checker.Touch): a ZooKeeper restored from a copy taken after the
	// claim then shows a counter below the database's, so a new node that
	// starts first sees the restore; without it a claim made less than a
	// heartbeat before the copy leaves no trace the new node can see, and
	// it may take the slot while this node serves from memory (issue 29
	// hole h). An error means the slot must not serve: the claim is
	// released and claimed again (the re-claim task retries; a start
	// retries up to startClaimAttempts times). nil: none.
	AfterClaim func(ctx context.Context) error
	// Holder receives the slot. Required.
	Holder Holder
	// Version is the node's software version, published in its member znode.
	Version string
}

// Lead is how far ahead of the clock a heartbeat writes the slot's mark:
// HeartbeatInterval + OutageTolerance + HighWaterMargin (after defaults).
func (c Config) Lead() time.Duration {
	c = c.withDefaults()
	return c.HeartbeatInterval + c.OutageTolerance + c.HighWaterMargin
}

// allowCached reports the effective AllowCachedSlotWithoutZK.
func (c *Config) allowCached() bool {
	return c.AllowCachedSlotWithoutZK != nil && *c.AllowCachedSlotWithoutZK
}

// Bool returns a pointer to v, for Config.AllowCachedSlotWithoutZK.
func Bool(v bool) *bool { return &v }

// withDefaults returns a copy of c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Root == "" {
		c.Root = DefaultRoot
	}
	if c.Cluster == "" {
		c.Cluster = DefaultCluster
	}
	if c.App == "" {
		c.App = DefaultApp
	}
	if c.Host == "" {
		c.Host = localIP()
	}
	if c.Port == 0 {
		c.Port = DefaultPort
	}
	if c.PropertiesDir == "" {
		c.PropertiesDir = DefaultPropertiesDir
	}
	c.Meta = c.Meta.withDefaults()
	if c.SessionTimeout == 0 {
		c.SessionTimeout = DefaultSessionTimeout
	}
	if c.OutageTolerance == 0 {
		c.OutageTolerance = DefaultOutageTolerance
	}
	if c.OutageTolerance < 0 {
		c.OutageTolerance = 0
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.HighWaterMargin == 0 {
		c.HighWaterMargin = DefaultHighWaterMargin
	}
	if c.MaxStartWait == 0 {
		c.MaxStartWait = DefaultMaxStartWait
	}
	if c.ConnectTimeout == 0 {
		c.ConnectTimeout = c.SessionTimeout
	}
	if c.MaxPeerClockSkew == 0 {
		c.MaxPeerClockSkew = DefaultMaxPeerClockSkew
	}
	if c.PeerClockTimeout == 0 {
		c.PeerClockTimeout = DefaultPeerClockTimeout
	}
	if c.Clock == nil {
		c.Clock = clock.System{}
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}

// Validate reports the first invalid field of c (after defaults are
// applied), naming it. Register calls it; call it early to fail fast.
func (c Config) Validate() error {
	c = c.withDefaults()
	if len(c.Servers) == 0 && c.Session == nil {
		return invalid("Servers", "is empty: give at least one ZooKeeper host:port")
	}
	for i, s := range c.Servers {
		if strings.TrimSpace(s) == "" {
			return invalid(fmt.Sprintf("Servers[%d]", i), "is empty")
		}
	}
	if err := validateRoot(c.Root); err != nil {
		return err
	}
	if err := validateName("Cluster", c.Cluster); err != nil {
		return err
	}
	if err := c.Meta.validate("Meta."); err != nil {
		return err
	}
	if err := validateSlotPart("IDC", c.IDC, c.Meta.IDCBits); err != nil {
		return err
	}
	if err := validateFileParts(c.App, c.Host, c.Port); err != nil {
		return err
	}
	switch {
	case c.SessionTimeout < 0:
		return invalid("SessionTimeout", "is negative")
	case c.HeartbeatInterval <= 0:
		return invalid("HeartbeatInterval", "must be positive")
	case c.HeartbeatInterval >= c.SessionTimeout:
		return invalid("HeartbeatInterval", fmt.Sprintf("is %v: must be below SessionTimeout (%v)", c.HeartbeatInterval, c.SessionTimeout))
	case c.HighWaterMargin < 0:
		return invalid("HighWaterMargin", "is negative")
	case c.MaxStartWait < 0:
		return invalid("MaxStartWait", "is negative")
	case c.ConnectTimeout < 0:
		return invalid("ConnectTimeout", "is negative")
	case c.MaxPeerClockSkew < 0:
		return invalid("MaxPeerClockSkew", "is negative")
	case c.PeerClockTimeout < 0:
		return invalid("PeerClockTimeout", "is negative")
	case c.Holder == nil:
		return invalid("Holder", "is nil: the lease needs someone to hand the slot to")
	}
	if c.Auth != "" {
		if u, p, ok := strings.Cut(c.Auth, ":"); !ok || u == "" || p == "" {
			// The value itself is a secret: never echo it.
			return invalid("Auth", `must be "user:password"`)
		}
	}
	return nil
}

func invalid(field, msg string) error {
	return fmt.Errorf("%w: %s %s", ErrInvalidConfig, field, msg)
}

func validateRoot(root string) error {
	if !strings.HasPrefix(root, "/") || (len(root) > 1 && strings.HasSuffix(root, "/")) || strings.Contains(root, "//") {
		return invalid("Root", fmt.Sprintf("%q is not an absolute ZooKeeper path like /idgen", root))
	}
	return nil
}

func validateName(field, v string) error {
	if v == "" || strings.ContainsAny(v, "/:\x00") || v == "." || v == ".." {
		return invalid(field, fmt.Sprintf("%q must be a non-empty name without '/', ':' or NUL", v))
	}
	return nil
}

func validateSlotPart(field string, v, bits int) error {
	if v < 0 || v >= 1<<bits {
		return invalid(field, fmt.Sprintf("is %d: must be in [0, %d] for %d bits", v, 1<<bits-1, bits))
	}
	return nil
}

func validateFileParts(app, host string, port int) error {
	if err := validateName("App", app); err != nil {
		return err
	}
	if host == "" || strings.ContainsAny(host, "/\x00") {
		return invalid("Host", fmt.Sprintf("%q must be a non-empty host name or IP", host))
	}
	if port < 0 || port > 65535 {
		return invalid("Port", fmt.Sprintf("is %d: must be in [0, 65535]", port))
	}
	return nil
}

// withDefaults fills the zero settings of m with the cluster defaults.
func (m Meta) withDefaults() Meta {
	if m.EpochMs == 0 {
		m.EpochMs = DefaultEpochMs
	}
	if m.IDCBits == 0 && m.NodeBits == 0 {
		m.IDCBits, m.NodeBits = DefaultIDCBits, DefaultNodeBits
	}
	return m
}

// validate checks the bit split and epoch; prefix names the field's parent.
func (m Meta) validate(prefix string) error {
	switch {
	case m.EpochMs < 0:
		return invalid(prefix+"EpochMs", "is negative")
	case m.IDCBits < 0 || m.NodeBits < 0:
		return invalid(prefix+"IDCBits", fmt.Sprintf("and NodeBits (%d, %d) must not be negative", m.IDCBits, m.NodeBits))
	case m.IDCBits+m.NodeBits != WorkerBits:
		return invalid(prefix+"IDCBits", fmt.Sprintf("+ NodeBits is %d+%d: must be %d (the worker field of a snowflake ID)", m.IDCBits, m.NodeBits, WorkerBits))
	case m.CreatedMs < 0:
		return invalid(prefix+"CreatedMs", "is negative")
	}
	return nil
}

// Worker returns the worker field for (idc, node) under m's bit split.
func (m Meta) Worker(idc, node int) int { return idc<<m.NodeBits | node }

// localIP returns the first non-loopback IPv4 address of this host, the
// address peers and operators most likely reach it on.
func localIP() string {
	addrs, err := net.InterfaceAddrs()
	if err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLoopback() && ipn.IP.To4() != nil {
				return ipn.IP.String()
			}
		}
	}
	return "127.0.0.1"
}
