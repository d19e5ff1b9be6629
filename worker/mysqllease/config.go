package mysqllease

import (
	"database/sql"
	"errors"
	"fmt"
	"time"

	"go.uber.org/zap"

	"github.com/idgen/idgen/clock"
	"github.com/idgen/idgen/worker"
)

// Defaults of Config. A zero field means its default.
const (
	DefaultHeartbeatInterval = worker.DefaultHeartbeatInterval // 3s
	DefaultOutageTolerance   = worker.DefaultOutageTolerance   // 30s
	DefaultMaxClockSkew      = time.Second
	DefaultTimeout           = 2 * time.Second
	// maxClusterName is the width of the cluster columns.
	maxClusterName = 128
)

// Errors of the package; returned errors wrap one of these and, where one
// fits, the worker package's sentinel too.
var (
	// ErrMetaMismatch: this node's snowflake settings differ from the
	// cluster's row in worker_cluster (also worker.ErrMetaMismatch).
	ErrMetaMismatch = errors.New("cluster settings differ from MySQL's worker_cluster")
	// ErrIDCFull: every worker slot of the IDC is held by a live node
	// (also worker.ErrNoFreeSlot).
	ErrIDCFull = errors.New("IDC full")
	// ErrClockSkew: the local clock is too far from the database's (also
	// worker.ErrClockSkew).
	ErrClockSkew = errors.New("clock differs from the database's")
	// ErrNoSchema: the worker tables do not exist, or predate schema 4
	// (run idctl db migrate).
	ErrNoSchema = errors.New("worker tables missing")
	// ErrRegistryMismatch: the cluster holds its worker slots in another
	// registry than this node (worker_cluster.registry), or is being
	// migrated; or a conditional registry change found another value than
	// the expected one.
	ErrRegistryMismatch = errors.New("cluster uses another worker registry")
	// ErrSlotsHeld: a registry migration found worker slots held by
	// running nodes.
	ErrSlotsHeld = errors.New("worker slots held by running nodes")
)

// Config configures Register. Zero fields but DB, Holder and (usually) IDC
// mean the documented default.
type Config struct {
	// DB is the MySQL database holding worker_cluster and worker_slot
	// (schema version 4 of segment/mysqlstore). Required. The lease does
	// not close it.
	DB *sql.DB
	// Cluster names the cluster (rows of the two tables). Default "default".
	Cluster string
	// IDC is this node's data center, 0 <= IDC < 1<<Meta.IDCBits.
	IDC int
	// Host, Port, Version: who holds the slot, for operators (ListWorkers).
	// Defaults: "127.0.0.1"-ish (empty is kept as ""), 8888, "".
	Host    string
	Port    int
	Version string
	// Meta: the node's snowflake settings. The first node stores them in
	// worker_cluster (CreatedMs = the database's now); every other node
	// compares and refuses on a difference. Zero EpochMs and bit split mean
	// the cluster defaults. CreatedMs is ignored.
	Meta worker.Meta
	// HeartbeatInterval: how often the slot's mark and lease are renewed.
	// Default 3s.
	HeartbeatInterval time.Duration
	// OutageTolerance: how long the node keeps serving SNOWFLAKE while the
	// database is unreachable. Every mark is written Lead =
	// HeartbeatInterval + OutageTolerance ahead, so at least
	// OutageTolerance of serving remains whenever an outage starts. The
	// cost: a crashed holder's slot is free for others only about Lead
	// later. Default 30s; negative means none.
	OutageTolerance time.Duration
	// MaxClockSkew: a node whose clock is further than this from the
	// database's NOW() (allowing for the round trip) refuses to start. It
	// is also added, twice, to the lease's time to live, so that when a
	// lease expires the holder's mark has passed on the taker's clock.
	// Default 1s.
	MaxClockSkew time.Duration
	// MaxStartWait: a node that would have to wait longer than this for
	// its clock to pass the best free slot's mark refuses to start.
	// Default Lead + 20s.
	MaxStartWait time.Duration
	// Timeout bounds each database round trip of the lease. Default 2s.
	Timeout time.Duration
	// Clock is the clock IDs are issued with (high-water marks are in it).
	// Default clock.System.
	Clock clock.Clock
	// Holder receives the slot. Required.
	Holder worker.Holder
	// Logger receives the lease's logs. nil: none.
	Logger *zap.Logger
}

// Lead is how far ahead of the clock the slot's mark is written:
// HeartbeatInterval + OutageTolerance (after defaults).
func (c Config) Lead() time.Duration {
	c = c.withDefaults()
	return c.HeartbeatInterval + max(c.OutageTolerance, 0) // negative: none (kept negative so defaults apply once)
}

// TTL is how long a lease lives in the database's clock after its last
// write: Lead + 2*MaxClockSkew. By the time it expires, the holder's mark
// (at most Lead after that write on the holder's clock) has passed on any
// clock within MaxClockSkew of the database, so a taker does not wait.
func (c Config) TTL() time.Duration {
	c = c.withDefaults()
	return c.Lead() + 2*c.MaxClockSkew
}

func (c Config) withDefaults() Config {
	if c.Cluster == "" {
		c.Cluster = worker.DefaultCluster
	}
	if c.Port == 0 {
		c.Port = worker.DefaultPort
	}
	c.Meta = metaDefaults(c.Meta)
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = DefaultHeartbeatInterval
	}
	if c.OutageTolerance == 0 {
		c.OutageTolerance = DefaultOutageTolerance
	}
	if c.MaxClockSkew == 0 {
		c.MaxClockSkew = DefaultMaxClockSkew
	}
	if c.MaxStartWait == 0 {
		c.MaxStartWait = c.HeartbeatInterval + max(c.OutageTolerance, 0) + 20*time.Second
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Clock == nil {
		c.Clock = clock.System{}
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}

// Validate reports the first invalid field (after defaults), naming it.
func (c Config) Validate() error {
	c = c.withDefaults()
	m := c.Meta
	switch {
	case c.DB == nil:
		return invalid("DB", "is nil: the lease needs the MySQL store's database")
	case c.Holder == nil:
		return invalid("Holder", "is nil: the lease needs someone to hand the slot to")
	}
	if err := validCluster("Config.Cluster", c.Cluster); err != nil {
		return err
	}
	if err := validMeta("Config.Meta", m); err != nil {
		return err
	}
	switch {
	case c.IDC < 0 || c.IDC >= 1<<m.IDCBits:
		return invalid("IDC", fmt.Sprintf("is %d: must be in [0, %d] for %d IDC bits", c.IDC, 1<<m.IDCBits-1, m.IDCBits))
	case c.Port < 0 || c.Port > 65535:
		return invalid("Port", fmt.Sprintf("is %d: must be in [0, 65535]", c.Port))
	case c.HeartbeatInterval < 0:
		return invalid("HeartbeatInterval", "is negative")
	case c.MaxClockSkew < 0:
		return invalid("MaxClockSkew", "is negative")
	case c.MaxStartWait < 0:
		return invalid("MaxStartWait", "is negative")
	case c.Timeout < 0:
		return invalid("Timeout", "is negative")
	}
	return nil
}

func invalid(field, msg string) error {
	return invalidArg("Config."+field, msg)
}

// invalidArg names an invalid argument or field (field is qualified, e.g.
// "Config.IDC" or "ClaimRegistry meta").
func invalidArg(field, msg string) error {
	return fmt.Errorf("%w: mysqllease.%s %s", worker.ErrInvalidConfig, field, msg)
}

// validCluster checks a cluster name (after its default) against the
// columns' width and character set.
func validCluster(field, cluster string) error {
	switch {
	case len(cluster) > maxClusterName:
		return invalidArg(field, fmt.Sprintf("is %d bytes, at most %d", len(cluster), maxClusterName))
	case !ascii(cluster):
		return invalidArg(field, fmt.Sprintf("%q must be printable ASCII", cluster))
	}
	return nil
}

// validMeta checks snowflake settings (after their defaults).
func validMeta(field string, m worker.Meta) error {
	switch {
	case m.EpochMs < 0:
		return invalidArg(field+".EpochMs", "is negative")
	case m.IDCBits < 0 || m.NodeBits < 0 || m.IDCBits+m.NodeBits != worker.WorkerBits:
		return invalidArg(field+".IDCBits", fmt.Sprintf("+ NodeBits is %d+%d: both >= 0 and summing to %d", m.IDCBits, m.NodeBits, worker.WorkerBits))
	}
	return nil
}

// metaDefaults fills zero snowflake settings with the cluster defaults, as
// Config does.
func metaDefaults(m worker.Meta) worker.Meta {
	if m.EpochMs == 0 {
		m.EpochMs = worker.DefaultEpochMs
	}
	if m.IDCBits == 0 && m.NodeBits == 0 {
		m.IDCBits, m.NodeBits = worker.DefaultIDCBits, worker.DefaultNodeBits
	}
	return m
}

func ascii(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}
