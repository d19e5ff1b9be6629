package mysqllease

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idgen/idgen/segment/mysqlstore"
	"github.com/idgen/idgen/worker"
)

// shared is one migrated database for the tests that do not disturb the
// schema (migrating 66 tables takes seconds); each test uses its own
// cluster name (t.Name()), so tests do not see each other's rows. TestMain
// drops it.
var shared struct {
	once sync.Once
	db   *sql.DB
	dsn  string
	err  error
	drop func()
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.drop != nil {
		shared.drop()
	}
	os.Exit(code)
}

// testDB returns the shared migrated database's pool (the MySQL store's,
// as the server passes it) and DSN. Without IDGEN_TEST_MYSQL the test is
// skipped.
func testDB(t testing.TB) (*sql.DB, string) {
	t.Helper()
	base := testServer(t)
	shared.once.Do(func() {
		shared.db, shared.dsn, shared.drop, shared.err = setupDB(base)
	})
	if shared.err != nil {
		t.Fatalf("test database: %v", shared.err)
	}
	return shared.db, shared.dsn
}

// privateDB is testDB with a database of the test's own, dropped at its
// end (for tests that change the schema).
func privateDB(t testing.TB) (*sql.DB, string) {
	t.Helper()
	db, dsn, drop, err := setupDB(testServer(t))
	if err != nil {
		t.Fatalf("test database: %v", err)
	}
	t.Cleanup(drop)
	return db, dsn
}

func testServer(t testing.TB) string {
	t.Helper()
	base := os.Getenv("IDGEN_TEST_MYSQL")
	if base == "" {
		t.Skip("IDGEN_TEST_MYSQL not set: integration test needs MariaDB (source .testenv, or ./build.sh test)")
	}
	return base
}

// setupDB creates a database with a random name on the server at base,
// migrates it and opens it with mysqlstore.Open; drop closes and drops it.
func setupDB(base string) (db *sql.DB, dsn string, drop func(), err error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return nil, "", nil, err
	}
	name := "idgen_test_lease_" + hex.EncodeToString(b[:])
	root, err := sql.Open("mysql", base)
	if err != nil {
		return nil, "", nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := root.ExecContext(ctx, "CREATE DATABASE `"+name+"`"); err != nil {
		root.Close()
		return nil, "", nil, fmt.Errorf("create database: %w", err)
	}
	var store *mysqlstore.Store
	drop = func() {
		if store != nil {
			store.Close()
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := root.ExecContext(ctx, "DROP DATABASE IF EXISTS `"+name+"`"); err != nil {
			fmt.Fprintf(os.Stderr, "drop database %s: %v\n", name, err)
		}
		root.Close()
	}
	mc, err := mysql.ParseDSN(base)
	if err != nil {
		drop()
		return nil, "", nil, fmt.Errorf("IDGEN_TEST_MYSQL: %w", err)
	}
	mc.DBName = name
	dsn = mc.FormatDSN()
	if _, err := mysqlstore.Migrate(ctx, dsn); err != nil {
		drop()
		return nil, "", nil, fmt.Errorf("migrate: %w", err)
	}
	store, err = mysqlstore.Open(ctx, mysqlstore.Config{DSN: dsn, CleanupInterval: -1, ShardCheckRows: -1})
	if err != nil {
		drop()
		return nil, "", nil, fmt.Errorf("mysqlstore.Open: %w", err)
	}
	return store.DB(), dsn, drop, nil
}

// recHolder records what the lease tells it. LastUsed returns what the
// test set.
type recHolder struct {
	mu       sync.Mutex
	acquired []worker.Slot
	extended []int64
	fenced   []error
	lastUsed int64
	changed  chan struct{} // poked on every call (buffer 1)
}

func newHolder() *recHolder { return &recHolder{changed: make(chan struct{}, 1)} }

func (h *recHolder) poke() {
	select {
	case h.changed <- struct{}{}:
	default:
	}
}

func (h *recHolder) Acquired(s worker.Slot) {
	h.mu.Lock()
	h.acquired = append(h.acquired, s)
	h.mu.Unlock()
	h.poke()
}

func (h *recHolder) Extended(hw int64) {
	h.mu.Lock()
	h.extended = append(h.extended, hw)
	h.mu.Unlock()
	h.poke()
}

func (h *recHolder) Fenced(reason error) {
	h.mu.Lock()
	h.fenced = append(h.fenced, reason)
	h.mu.Unlock()
	h.poke()
}

func (h *recHolder) LastUsed() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lastUsed
}

func (h *recHolder) setLastUsed(ms int64) {
	h.mu.Lock()
	h.lastUsed = ms
	h.mu.Unlock()
}

// durableMark is the highest mark the lease reported as durable: the
// highest timestamp this holder may have issued.
func (h *recHolder) durableMark() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var m int64
	for _, s := range h.acquired {
		m = max(m, s.HighWater)
	}
	for _, hw := range h.extended {
		m = max(m, hw)
	}
	return m
}

func (h *recHolder) counts() (acquired, extended, fenced int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.acquired), len(h.extended), len(h.fenced)
}

func (h *recHolder) lastFence() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.fenced) == 0 {
		return nil
	}
	return h.fenced[len(h.fenced)-1]
}

// waitFor polls cond until it holds or the test's patience (30s) ends.
func waitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// register starts a lease on db with cfg's fields filled in; closed at
// cleanup.
func register(t testing.TB, db *sql.DB, cfg Config) (*Lease, *recHolder) {
	t.Helper()
	l, h, err := tryRegister(t, db, cfg)
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	return l, h
}

func tryRegister(t testing.TB, db *sql.DB, cfg Config) (*Lease, *recHolder, error) {
	t.Helper()
	h := newHolder()
	cfg.DB, cfg.Holder = db, h
	if cfg.Cluster == "" {
		cfg.Cluster = t.Name()
	}
	if cfg.Host == "" {
		cfg.Host = "10.0.0.1"
	}
	l, err := Register(ctxT(t), cfg)
	if err != nil {
		return nil, h, err
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return l, h, nil
}

// row is a worker_slot row as tests read it.
type row struct {
	holder     sql.NullString
	leaseUntil int64
	highWater  int64
	releasedAt int64
	gen        int64
}

func readRow(t testing.TB, db *sql.DB, cluster string, idc, node int) row {
	t.Helper()
	var r row
	err := db.QueryRowContext(ctxT(t), `SELECT holder, lease_until_ms, high_water_ms, released_at_ms, gen FROM worker_slot WHERE cluster = ? AND idc = ? AND node = ?`,
		cluster, idc, node).Scan(&r.holder, &r.leaseUntil, &r.highWater, &r.releasedAt, &r.gen)
	if err != nil {
		t.Fatalf("read slot row %s/%d/%d: %v", cluster, idc, node, err)
	}
	return r
}

// expireLease makes a slot's lease end now in the database's clock, as if
// its holder had stopped heartbeating TTL ago (deterministic, unlike
// waiting for a short TTL).
func expireLease(t testing.TB, db *sql.DB, cluster string, idc, node int) {
	t.Helper()
	if _, err := db.ExecContext(ctxT(t), `UPDATE worker_slot SET lease_until_ms = `+dbNowMs+` - 1 WHERE cluster = ? AND idc = ? AND node = ?`,
		cluster, idc, node); err != nil {
		t.Fatal(err)
	}
}

func mustContain(t testing.TB, err error, parts ...string) {
	t.Helper()
	for _, p := range parts {
		if err == nil || !strings.Contains(err.Error(), p) {
			t.Fatalf("error %v does not contain %q", err, p)
		}
	}
}
