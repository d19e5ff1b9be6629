package mysqlstore

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
	"go.uber.org/zap"
)

// Defaults for Config fields left zero.
const (
	DefaultMaxOpenConns     = 32
	DefaultConnMaxLifetime  = 5 * time.Minute
	DefaultTimeout          = 2 * time.Second
	DefaultRequestRetention = 24 * time.Hour
	DefaultCleanupInterval  = 10 * time.Minute
	DefaultCleanupBatch     = 1000
	DefaultShardCheckRows   = 100
)

// Config configures a Store. The zero value of every field but DSN means the
// documented default.
type Config struct {
	// DSN is a go-sql-driver/mysql data source name including the database,
	// e.g. "idgen:secret@tcp(db1:3306)/idgen". Open forces the parameters the
	// store relies on (parseTime, UTC, interpolateParams, the session's
	// innodb_lock_wait_timeout and wait_timeout, mysqldb.SessionIdleLimit); others
	// are kept.
	DSN string
	// MaxOpenConns bounds the connection pool (default 32).
	MaxOpenConns int
	// MaxIdleConns is the number of idle connections kept (default
	// MaxOpenConns, so a busy node does not reconnect all the time).
	MaxIdleConns int
	// ConnMaxLifetime closes connections older than this (default 5m), so a
	// failover behind a DNS name or proxy is picked up.
	ConnMaxLifetime time.Duration
	// Timeout bounds every Store call, including the wait for a pooled
	// connection, lock waits and a whole request_id transaction (default
	// 2s). It also sets the dial timeout when the DSN has none and the
	// session's innodb_lock_wait_timeout (half of it, rounded up to whole
	// seconds).
	Timeout time.Duration
	// RequestRetention is how long ORDERED request ids are remembered
	// (default 24h): a retry later than this gets a new range.
	RequestRetention time.Duration
	// CleanupInterval is how often expired request ids are deleted (default
	// 10m; negative disables the background cleanup, CleanupRequests still
	// works). One node at a time does it.
	CleanupInterval time.Duration
	// CleanupBatch is the number of rows one cleanup statement deletes
	// (default 1000).
	CleanupBatch int
	// ShardCheckRows is how many rows per ORDERED table Open samples to
	// check they sit in the table this store's shard mapping expects
	// (default 100; negative skips the check).
	ShardCheckRows int
	// Migrate makes Open apply pending schema migrations (needs the DDL
	// privileges of `idctl db migrate`). Default off: Open only checks.
	Migrate bool
	// AcceptUnsafeDurability lets Open continue (logging at error level)
	// on a server that can lose committed transactions in a crash
	// (innodb_flush_log_at_trx_commit not 1, or the binary log on with
	// sync_binlog not 1; see Durability). Such a server can forget a
	// reservation and hand the same IDs out twice. Default off: Open
	// refuses, naming the variables and the fix. idgen's flag:
	// --mysql-accept-unsafe-durability.
	AcceptUnsafeDurability bool
	// Logger receives the store's logs (nil: none). The password is never
	// logged.
	Logger *zap.Logger
}

// Validate reports the first invalid field, by name.
func (c Config) Validate() error {
	if c.DSN == "" {
		return errors.New("mysqlstore: Config.DSN is empty")
	}
	mc, err := mysql.ParseDSN(c.DSN)
	if err != nil {
		return fmt.Errorf("mysqlstore: Config.DSN: %w", err)
	}
	if mc.DBName == "" {
		return errors.New("mysqlstore: Config.DSN names no database (want user:pass@tcp(host:port)/DBNAME)")
	}
	switch {
	case c.MaxOpenConns < 0:
		return fmt.Errorf("mysqlstore: Config.MaxOpenConns is %d, want >= 0 (0 = %d)", c.MaxOpenConns, DefaultMaxOpenConns)
	case c.MaxIdleConns < 0:
		return fmt.Errorf("mysqlstore: Config.MaxIdleConns is %d, want >= 0", c.MaxIdleConns)
	case c.ConnMaxLifetime < 0:
		return fmt.Errorf("mysqlstore: Config.ConnMaxLifetime is %v, want >= 0", c.ConnMaxLifetime)
	case c.Timeout < 0:
		return fmt.Errorf("mysqlstore: Config.Timeout is %v, want >= 0 (0 = %v)", c.Timeout, DefaultTimeout)
	case c.RequestRetention < 0:
		return fmt.Errorf("mysqlstore: Config.RequestRetention is %v, want >= 0 (0 = %v)", c.RequestRetention, DefaultRequestRetention)
	case c.CleanupBatch < 0:
		return fmt.Errorf("mysqlstore: Config.CleanupBatch is %d, want >= 0 (0 = %d)", c.CleanupBatch, DefaultCleanupBatch)
	}
	return nil
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.MaxOpenConns == 0 {
		c.MaxOpenConns = DefaultMaxOpenConns
	}
	if c.MaxIdleConns == 0 || c.MaxIdleConns > c.MaxOpenConns {
		c.MaxIdleConns = c.MaxOpenConns
	}
	if c.ConnMaxLifetime == 0 {
		c.ConnMaxLifetime = DefaultConnMaxLifetime
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.RequestRetention == 0 {
		c.RequestRetention = DefaultRequestRetention
	}
	if c.CleanupInterval == 0 {
		c.CleanupInterval = DefaultCleanupInterval
	}
	if c.CleanupBatch == 0 {
		c.CleanupBatch = DefaultCleanupBatch
	}
	if c.ShardCheckRows == 0 {
		c.ShardCheckRows = DefaultShardCheckRows
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c
}

// driverConfig parses dsn and forces the settings the store relies on.
// timeout sets the dial timeout (when the DSN has none) and the session's
// lock wait timeout.
func driverConfig(dsn string, timeout time.Duration, log *zap.Logger) (*mysql.Config, error) {
	mc, _, err := driverConfigMembers(dsn, timeout, log)
	return mc, err
}

// driverConfigMembers is driverConfig that also returns the dialer of a
// DSN naming several members (nil for one).
func driverConfigMembers(dsn string, timeout time.Duration, log *zap.Logger) (*mysql.Config, *memberDialer, error) {
	first, members, err := splitMembers(dsn)
	if err != nil {
		return nil, nil, err
	}
	mc, err := mysql.ParseDSN(first)
	if err != nil {
		return nil, nil, fmt.Errorf("mysqlstore: DSN: %w", err)
	}
	var dialer *memberDialer
	if len(members) > 1 {
		if mc.Timeout == 0 {
			mc.Timeout = timeout
		}
		dialer = newMemberDialer(members, mc.Timeout)
		mc.DialFunc = dialer.dial
	}
	if mc.DBName == "" {
		return nil, nil, errors.New("mysqlstore: DSN names no database (want user:pass@tcp(host:port)/DBNAME)")
	}
	mc.ParseTime = true
	mc.Loc = time.UTC
	// One round trip per statement instead of prepare/execute/close. Safe:
	// the driver refuses it with the few multibyte collations where it is
	// not (big5, gbk, sjis, ...).
	mc.InterpolateParams = true
	// Several statements per Exec, joined with ";": the ORDERED owners'
	// group commit writes one table per shard and sends those writes in
	// one round trip (ordered/mysqlstore). Safe with InterpolateParams:
	// the driver escapes every value (honouring the server's
	// NO_BACKSLASH_ESCAPES), and no statement of idgen is built from
	// unescaped input (table names are formatted from shard numbers).
	// Only Conn.ExecJoined joins statements; every other call sends one.
	mc.MultiStatements = true
	mc.ClientFoundRows = false // affected rows = changed rows; the code relies on it
	// A server that turned read-only (a demoted primary) answers 1290/1792;
	// drop such connections so the pool reconnects to the new primary.
	mc.RejectReadOnly = true
	if mc.Timeout == 0 {
		mc.Timeout = timeout
	}
	if mc.Params == nil {
		mc.Params = map[string]string{}
	}
	// Lock waits end on the server (error 1205) before the client gives
	// up at the timeout: the connection stays usable, and a request stuck
	// behind a lock does not hold its own locks for the default 50 s after
	// its caller is gone.
	mc.Params["innodb_lock_wait_timeout"] = strconv.Itoa(lockWaitSeconds(timeout))
	if log != nil {
		mc.Logger = driverLogger{log}
	}
	if dialer != nil {
		mc.Addr = strings.Join(members, ",") // for messages
	}
	return mc, dialer, nil
}

// lockWaitSeconds is half the timeout, rounded up to whole seconds (the
// variable's unit; MySQL's minimum is 1).
func lockWaitSeconds(d time.Duration) int {
	s := int(math.Ceil(d.Seconds() / 2))
	if s < 1 {
		s = 1
	}
	return s
}

// redactedDSN names the server and database for logs and errors, without
// the password or parameters: user@tcp(host:port)/db.
func redactedDSN(mc *mysql.Config) string {
	return fmt.Sprintf("%s@%s(%s)/%s", mc.User, mc.Net, mc.Addr, mc.DBName)
}

// driverLogger sends the driver's own messages (for example "closing bad
// idle connection") to zap.
type driverLogger struct{ log *zap.Logger }

func (l driverLogger) Print(v ...any) {
	l.log.Warn("mysql driver", zap.String("msg", fmt.Sprint(v...)))
}
