package mysqlstore

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"database/sql/driver"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idgen/idgen/internal/mysqldb"
	"github.com/idgen/idgen/internal/mysqlerr"
)

// Migration is one schema version.
type Migration struct {
	Version     int
	Description string
	stmts       []string
	// apply runs after stmts, for steps that need a look first (an ALTER
	// guarded by information_schema).
	apply func(ctx context.Context, conn *sql.Conn) error
}

// Every statement of a migration must be idempotent (CREATE TABLE IF NOT
// EXISTS, or an ALTER guarded by a look at information_schema in code):
// DDL commits implicitly, so a migration interrupted half-way is simply run
// again. Valid on MariaDB 10.11 and MySQL 8: no RETURNING, no IF NOT EXISTS
// on ADD COLUMN, no MariaDB-only collations.
var migrations = []Migration{
	{Version: 1, Description: "businesses, UNORDERED segments, 64 ORDERED tables, ORDERED request ids", stmts: schemaV1()},
	{Version: 2, Description: "snowflake worker slots held in MySQL (worker_cluster, worker_slot)", stmts: schemaV2()},
	{Version: 3, Description: "business output settings: obfuscate, format, code_min_length, plugins, secret_key, issued", apply: schemaV3},
	{Version: 4, Description: "worker registry of each cluster (worker_cluster.registry)", apply: schemaV4},
	{Version: 5, Description: "business ID quota, burst and client tokens; secret_key wide enough for wrapped keys", apply: schemaV5},
	{Version: 6, Description: "ORDERED shard owners' epochs (ordered_shard) and the business ordered_mode", stmts: schemaV6(), apply: schemaV6Columns},
	{Version: 7, Description: "ORDERED request ids scoped to the caller's credential (ordered_request.request_id widened)", apply: schemaV7},
	{Version: 8, Description: "the channels each business serves (biz.channels)", apply: schemaV8},
	{Version: 9, Description: "the cluster the database belongs to (cluster_binding)", stmts: schemaV9()},
	{Version: 10, Description: "the ZooKeeper incarnation witness (cluster_binding.zk_incarnation, zk_counter)", apply: schemaV10},
	{Version: 11, Description: "the ORDERED owners' lease nonce held in the store (ordered_shard.lease_nonce)", apply: schemaV11},
}

// bizColumnsV3 are the columns schema 3 adds to biz. secret_key is empty
// for businesses created before it; the store generates one on their next
// update (always before the output settings can matter).
var bizColumnsV3 = []struct{ name, def string }{
	{"obfuscate", "BOOLEAN NOT NULL DEFAULT 0"},
	{"format", "TINYINT NOT NULL DEFAULT 0"},
	{"code_min_length", "INT NOT NULL DEFAULT 0"},
	{"plugins", "VARCHAR(512) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT ''"},
	{"secret_key", "VARBINARY(32) NOT NULL DEFAULT ''"},
	{"issued", "BOOLEAN NOT NULL DEFAULT 0"},
}

// addColumns adds each column to table unless it is there, each guarded
// by a look at information_schema (no ADD COLUMN IF NOT EXISTS on MySQL 8).
func addColumns(ctx context.Context, conn *sql.Conn, table string, cols []struct{ name, def string }) error {
	for _, c := range cols {
		var n int
		err := conn.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.COLUMNS
  WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = ?`, table, c.name).Scan(&n)
		if err != nil {
			return err
		}
		if n > 0 {
			continue
		}
		if _, err := conn.ExecContext(ctx, "ALTER TABLE "+table+" ADD COLUMN "+c.name+" "+c.def); err != nil {
			return fmt.Errorf("add column %s.%s: %w", table, c.name, err)
		}
	}
	return nil
}

// schemaV3 adds the output columns.
func schemaV3(ctx context.Context, conn *sql.Conn) error {
	if err := addColumns(ctx, conn, "biz", bizColumnsV3); err != nil {
		return err
	}
	// Businesses from before schema 3 (no key yet) count as issued: the
	// rule of segment.StoredIssued, kept in the rows here.
	if _, err := conn.ExecContext(ctx, "UPDATE biz SET issued = 1 WHERE secret_key = ''"); err != nil {
		return fmt.Errorf("lock the output of existing businesses: %w", err)
	}
	return nil
}

// workerClusterColumnsV4: registry names where the cluster's worker slots
// are held: 'mysql' (worker_slot, package worker/mysqllease), 'zookeeper'
// (a cluster whose nodes run with --zk and --mysql: the row only records
// the choice), or 'migrating' (idctl cluster migrate is moving it; nodes of
// both kinds are refused meanwhile). Rows from before schema 4 were all
// written by MySQL-held clusters, so the default makes them 'mysql', and a
// node of an older build that inserts a row (it runs with --mysql alone)
// gets 'mysql' too.
var workerClusterColumnsV4 = []struct{ name, def string }{
	{"registry", "VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT 'mysql'"},
}

func schemaV4(ctx context.Context, conn *sql.Conn) error {
	return addColumns(ctx, conn, "worker_cluster", workerClusterColumnsV4)
}

// bizColumnsV5 are the columns schema 5 adds to biz. Businesses from
// before it read as they behaved: no ID quota, no burst, and no tokens of
// their own (tokens NULL or empty: the shared client token opens them).
// tokens is the JSON list of the business's tokens (their hashes, never
// the secrets): at most segment.MaxBizTokens small entries, read and
// written only with the row, so a table of its own would add nothing
// but a join.
var bizColumnsV5 = []struct{ name, def string }{
	{"id_quota", "BIGINT NOT NULL DEFAULT 0"},
	{"id_burst", "BIGINT NOT NULL DEFAULT 0"},
	{"tokens", "TEXT CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL"},
}

// secretKeyWidth is the width of biz.secret_key from schema 5: a plain key
// (segment.KeySize) or one wrapped by a master key
// (segment.WrappedKeySize, 45 bytes), with room for a longer wrapping.
const secretKeyWidth = 64

// schemaV5 adds the quota and token columns and widens secret_key.
func schemaV5(ctx context.Context, conn *sql.Conn) error {
	if err := addColumns(ctx, conn, "biz", bizColumnsV5); err != nil {
		return err
	}
	return widenColumn(ctx, conn, "biz", "secret_key", secretKeyWidth,
		fmt.Sprintf("VARBINARY(%d) NOT NULL DEFAULT ''", secretKeyWidth))
}

// schemaV6 creates ordered_shard: one row per ORDERED shard with the epoch
// of its current owner (package ordered). Every persist of an owner is
// conditional on its epoch being the row's, so a deposed owner's write
// fails; a new owner raises the epoch (never lowers it) before it loads
// a single counter of the shard. persists counts the owner's persists: each
// one increments it under the epoch condition, a real write, so Galera
// certifies a persist against a concurrent claim (a read lock is local to
// one member) and the first statement of a persist both fences and locks.
func schemaV6() []string {
	return []string{`CREATE TABLE IF NOT EXISTS ordered_shard (
  shard      INT NOT NULL,
  epoch      BIGINT NOT NULL,
  owner      VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
  persists   BIGINT NOT NULL DEFAULT 0,
  updated_at DATETIME(6) NOT NULL,
  PRIMARY KEY (shard)
) ENGINE=InnoDB`}
}

// schemaV9 creates cluster_binding: the one cluster this database
// belongs to (binding.go). ordered_shard and the counters are not scoped
// by cluster, so a second cluster on the database would take the first
// one's ORDERED shards with epochs from another coordinator.
func schemaV9() []string {
	return []string{`CREATE TABLE IF NOT EXISTS cluster_binding (
  id         TINYINT NOT NULL,
  cluster    VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  created_ms BIGINT NOT NULL,
  bound_by   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL DEFAULT '',
  bound_at   DATETIME(6) NOT NULL,
  PRIMARY KEY (id)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`}
}

// schemaV10 adds the witness of the cluster's ZooKeeper incarnation to
// cluster_binding (incarnation.go): the marker's ID and the highest
// counter ZooKeeper reached, so that a node with no local record (a new
// node that starts first after ZooKeeper was restored from a copy) can
// tell that ZooKeeper went back (issue 29, hole h).
func schemaV10(ctx context.Context, conn *sql.Conn) error {
	return addColumns(ctx, conn, "cluster_binding", []struct{ name, def string }{
		{"zk_incarnation", "VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT ''"},
		{"zk_counter", "BIGINT NOT NULL DEFAULT 0"},
	})
}

// schemaV11 adds ordered_shard.lease_nonce: the store-held lease of the
// shard's owner (ordered.LeaseStore, ordered/storelease.go). The owner's
// renewals write a fresh random nonce (32 hex characters) into the rows
// of the shards it serves, every claim writes one too and a clean
// hand-off's write-back clears it; a node taking a shard over claims only
// over the nonce it saw unchanged for a lease. The empty nonce (every row from before
// schema 11, and every row an older node claims during a rolling
// upgrade) reads as a lease nobody renews in the store: such owners
// renew through the coordinator only, as before.
func schemaV11(ctx context.Context, conn *sql.Conn) error {
	return addColumns(ctx, conn, "ordered_shard", []struct{ name, def string }{
		{"lease_nonce", "VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT ''"},
	})
}

// bizColumnsV6 is the column schema 6 adds to biz: segment.OrderedMode
// (0 gapless, the behaviour of every business before it; 1 cached).
var bizColumnsV6 = []struct{ name, def string }{
	{"ordered_mode", "TINYINT NOT NULL DEFAULT 0"},
}

func schemaV6Columns(ctx context.Context, conn *sql.Conn) error {
	return addColumns(ctx, conn, "biz", bizColumnsV6)
}

// schemaV7 widens ordered_request.request_id so it holds a request id
// with the scope of the credential it came with
// (segment.StoredRequestID). Rows already there are unscoped ids, read
// as they were written. An older build, still running during a rolling
// upgrade, reads and writes unscoped ids only: it meets a scoped row only
// if a caller sends that row's whole key (NUL, scope, NUL, id) as its
// request id, which this build refuses.
func schemaV7(ctx context.Context, conn *sql.Conn) error {
	return widenColumn(ctx, conn, "ordered_request", "request_id", requestIDColumnBytes,
		fmt.Sprintf("VARBINARY(%d) NOT NULL", requestIDColumnBytes))
}

// bizColumnsV8 is the column schema 8 adds to biz: the channels the
// business serves, as comma-separated numbers ("0,2"; at most
// segment.MaxBizChannels of 0..127). Rows from before it, and rows an
// older node inserts during a rolling upgrade, hold the empty string: they read as
// segment.StoredChannels says (every built-in channel for a plain
// business, its own channel only for an obfuscated or code one), so the
// rule lives in one place and the migration rewrites no row.
var bizColumnsV8 = []struct{ name, def string }{
	{"channels", "VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL DEFAULT ''"},
}

func schemaV8(ctx context.Context, conn *sql.Conn) error {
	return addColumns(ctx, conn, "biz", bizColumnsV8)
}

// widenColumn changes a column to def unless it is already at least width
// long (a look at information_schema first, so that running it again
// neither rebuilds the table nor narrows a column a later schema widened
// further).
func widenColumn(ctx context.Context, conn *sql.Conn, table, column string, width int64, def string) error {
	var have sql.NullInt64
	err := conn.QueryRowContext(ctx, `SELECT CHARACTER_MAXIMUM_LENGTH FROM information_schema.COLUMNS
  WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? AND COLUMN_NAME = ?`, table, column).Scan(&have)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("widen column %s.%s: no such column (an earlier migration is missing: run all of them)", table, column)
	}
	if err != nil {
		return err
	}
	if have.Valid && have.Int64 >= width {
		return nil
	}
	if _, err := conn.ExecContext(ctx, "ALTER TABLE "+table+" MODIFY COLUMN "+column+" "+def); err != nil {
		return fmt.Errorf("widen column %s.%s to %s: %w", table, column, def, err)
	}
	return nil
}

// LatestVersion is the schema version this build needs.
func LatestVersion() int { return migrations[len(migrations)-1].Version }

// Names are compared byte for byte: ascii_bin for business names (the name
// syntax is ASCII without spaces), VARBINARY for sub keys and request ids
// (no collation: 'a' and 'A', or 'a' and 'a ' with a PAD SPACE collation,
// must be different keys, and MariaDB and MySQL share no NO PAD binary
// collation for utf8mb4).
func schemaV1() []string {
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS biz (
  name          VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  channel       TINYINT NOT NULL,
  step          BIGINT NOT NULL,
  low_water_pct INT NOT NULL,
  start_num     BIGINT NOT NULL,
  fallback      BOOLEAN NOT NULL,
  rate_limit    BIGINT NOT NULL,
  description   VARCHAR(1024) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  created_at    DATETIME(6) NOT NULL,
  updated_at    DATETIME(6) NOT NULL,
  PRIMARY KEY (name)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		`CREATE TABLE IF NOT EXISTS segment (
  biz        VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  max_id     BIGINT NOT NULL,
  step       BIGINT NOT NULL,
  updated_at DATETIME(6) NOT NULL,
  PRIMARY KEY (biz)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		`CREATE TABLE IF NOT EXISTS ordered_request (
  biz        VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  request_id VARBINARY(128) NOT NULL,
  sub_key    VARBINARY(1024) NOT NULL,
  ` + "`count`" + `    BIGINT NOT NULL,
  ` + "`first`" + `    BIGINT NOT NULL,
  ` + "`last`" + `     BIGINT NOT NULL,
  created_at DATETIME(6) NOT NULL,
  PRIMARY KEY (biz, request_id),
  KEY idx_ordered_request_created_at (created_at)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
	}
	for i := 0; i < OrderedTables; i++ {
		stmts = append(stmts, `CREATE TABLE IF NOT EXISTS `+mysqldb.OrderedTable(i)+` (
  biz     VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  sub_key VARBINARY(1024) NOT NULL,
  num     BIGINT NOT NULL,
  PRIMARY KEY (biz, sub_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`)
	}
	return stmts
}

// schemaV2 holds the snowflake worker slots of clusters that run with
// --mysql and no ZooKeeper (package worker/mysqllease, which documents the
// protocol). Times ending in _ms are Unix milliseconds: lease_until_ms,
// heartbeat_ms and released_at_ms in the database's clock (so that the
// expiry of a lease does not depend on any node's clock), high_water_ms in
// the holder's clock (it is a snowflake timestamp). gen grows by one on
// every write to a row; each write is conditional on the gen its writer
// last saw, so a late write can never lower a successor's mark.
func schemaV2() []string {
	return []string{
		`CREATE TABLE IF NOT EXISTS worker_cluster (
  cluster    VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  epoch_ms   BIGINT NOT NULL,
  idc_bits   INT NOT NULL,
  node_bits  INT NOT NULL,
  created_ms BIGINT NOT NULL,
  PRIMARY KEY (cluster)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
		`CREATE TABLE IF NOT EXISTS worker_slot (
  cluster         VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
  idc             INT NOT NULL,
  node            INT NOT NULL,
  holder          CHAR(36) CHARACTER SET ascii COLLATE ascii_bin NULL,
  host            VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  port            INT NOT NULL,
  pid             INT NOT NULL,
  version         VARCHAR(128) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
  started_at_ms   BIGINT NOT NULL,
  lease_until_ms  BIGINT NOT NULL,
  high_water_ms   BIGINT NOT NULL,
  released_at_ms  BIGINT NOT NULL,
  heartbeat_ms    BIGINT NOT NULL,
  clock_offset_ms BIGINT NOT NULL,
  gen             BIGINT NOT NULL,
  PRIMARY KEY (cluster, idc, node)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`,
	}
}

const createSchemaVersion = `CREATE TABLE IF NOT EXISTS schema_version (
  version     INT NOT NULL,
  description VARCHAR(255) NOT NULL,
  applied_at  DATETIME(6) NOT NULL,
  PRIMARY KEY (version)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin`

// migrateLockWait bounds the wait for another node's migration;
// migrateStatementTimeout is the dial and lock wait timeout of Migrate's
// own connection (DDL may wait for locks longer than a reservation).
const (
	migrateLockWait         = 60 * time.Second
	migrateStatementTimeout = 30 * time.Second
)

// Migrate creates or upgrades the schema in the DSN's database (which must
// exist) and returns the migrations it applied (none when the schema is
// current). It is safe to run from several nodes at once: they take turns
// through GET_LOCK, and every statement is idempotent anyway.
func Migrate(ctx context.Context, dsn string) ([]Migration, error) {
	db, mc, err := openDB(dsn, migrateStatementTimeout)
	if err != nil {
		return nil, err
	}
	defer db.Close()
	applied, err := MigrateDB(ctx, db)
	if err != nil {
		return applied, mysqldb.ClassifyErr(ctx, "migrate "+redactedDSN(mc), err, mc.Addr, migrateStatementTimeout)
	}
	return applied, nil
}

// MigrateDB is Migrate on an open database handle.
func MigrateDB(ctx context.Context, db *sql.DB) ([]Migration, error) {
	return migrateDB(ctx, db, migrations)
}

// migrateDB applies the missing migrations of ms (tests pass a prefix of
// migrations to build an older schema).
func migrateDB(ctx context.Context, db *sql.DB, ms []Migration) ([]Migration, error) {
	conn, err := db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	defer conn.Close()

	var dbName sql.NullString
	if err := conn.QueryRowContext(ctx, `SELECT DATABASE()`).Scan(&dbName); err != nil {
		return nil, err
	}
	if !dbName.Valid || dbName.String == "" {
		return nil, errors.New("no database selected (put the database name in the DSN)")
	}
	release, err := getLock(ctx, conn, lockName("migrate", dbName.String), migrateLockWait)
	if err != nil {
		return nil, err
	}
	defer release()

	if _, err := conn.ExecContext(ctx, createSchemaVersion); err != nil {
		return nil, err
	}
	have, err := appliedVersions(ctx, conn)
	if err != nil {
		return nil, err
	}
	var applied []Migration
	for _, m := range ms {
		if have[m.Version] {
			continue
		}
		for _, stmt := range m.stmts {
			if _, err := conn.ExecContext(ctx, stmt); err != nil {
				return applied, fmt.Errorf("schema version %d: %w", m.Version, err)
			}
		}
		if m.apply != nil {
			if err := m.apply(ctx, conn); err != nil {
				return applied, fmt.Errorf("schema version %d: %w", m.Version, err)
			}
		}
		if _, err := conn.ExecContext(ctx,
			`INSERT IGNORE INTO schema_version (version, description, applied_at) VALUES (?, ?, ?)`,
			m.Version, m.Description, time.Now().UTC()); err != nil {
			return applied, fmt.Errorf("schema version %d: %w", m.Version, err)
		}
		applied = append(applied, Migration{Version: m.Version, Description: m.Description})
	}
	return applied, nil
}

func appliedVersions(ctx context.Context, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}) (map[int]bool, error) {
	rows, err := q.QueryContext(ctx, `SELECT version FROM schema_version`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	have := map[int]bool{}
	for rows.Next() {
		var v int
		if err := rows.Scan(&v); err != nil {
			return nil, err
		}
		have[v] = true
	}
	return have, rows.Err()
}

// SchemaVersion returns the highest schema version applied to the DSN's
// database (0 when none) and the version this build needs.
func SchemaVersion(ctx context.Context, dsn string) (current, latest int, err error) {
	db, mc, err := openDB(dsn, DefaultTimeout)
	if err != nil {
		return 0, LatestVersion(), err
	}
	defer db.Close()
	current, err = schemaVersionDB(ctx, db)
	if err != nil {
		return 0, LatestVersion(), mysqldb.ClassifyErr(ctx, "read schema version from "+redactedDSN(mc), err, mc.Addr, DefaultTimeout)
	}
	return current, LatestVersion(), nil
}

func schemaVersionDB(ctx context.Context, db *sql.DB) (int, error) {
	var v sql.NullInt64
	err := db.QueryRowContext(ctx, `SELECT MAX(version) FROM schema_version`).Scan(&v)
	if mysqlerr.Number(err) == mysqlerr.NoSuchTable {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return int(v.Int64), nil
}

// getLock takes a MySQL user lock on conn (the lock belongs to that
// session: it is released by release, or by the server when the session
// ends). wait 0 means do not wait. It returns errLockBusy when another
// session holds the lock.
func getLock(ctx context.Context, conn *sql.Conn, name string, wait time.Duration) (release func(), err error) {
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, ?)`, name, int(wait.Seconds())).Scan(&got); err != nil {
		return nil, err
	}
	if !got.Valid || got.Int64 != 1 {
		return nil, fmt.Errorf("%w: %s", errLockBusy, name)
	}
	return func() {
		// A fresh context: the caller's may be done, and a lock left behind
		// would only go away with the session.
		rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.ExecContext(rctx, `DO RELEASE_LOCK(?)`, name); err != nil {
			_ = conn.Raw(func(any) error { return driver.ErrBadConn })
		}
	}, nil
}

var errLockBusy = errors.New("lock held by another session")

// lockName returns a server-wide user lock name for this database (lock
// names are global to the server, at most 64 characters).
func lockName(what, dbName string) string {
	name := "idgen:" + what + ":" + dbName
	if len(name) <= 64 {
		return name
	}
	sum := sha256.Sum256([]byte(dbName))
	return "idgen:" + what + ":" + hex.EncodeToString(sum[:12])
}

// openDB opens a pool with the store's forced driver settings.
func openDB(dsn string, timeout time.Duration) (*sql.DB, *mysql.Config, error) {
	mc, err := driverConfig(dsn, timeout, nil)
	if err != nil {
		return nil, nil, err
	}
	conn, err := mysql.NewConnector(mc)
	if err != nil {
		return nil, nil, fmt.Errorf("mysqlstore: DSN: %w", err)
	}
	return sql.OpenDB(conn), mc, nil
}
