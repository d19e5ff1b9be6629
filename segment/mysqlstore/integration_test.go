package mysqlstore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/mysqldb"
	"github.com/idgen/idgen/internal/mysqlerr"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/storetest"
)

func TestIntegration_Conformance(t *testing.T) {
	dsn := newTestDatabase(t, testServer(t), true)
	storetest.Run(t, func(t *testing.T) segment.Store {
		return openStore(t, dsn, nil)
	})
}

func TestIntegration_MigrateTwiceAndConcurrently(t *testing.T) {
	base := testServer(t)
	ctx := testCtx(t)

	dsn := newTestDatabase(t, base, false)
	if cur, latest, err := SchemaVersion(ctx, dsn); err != nil || cur != 0 || latest != LatestVersion() {
		t.Fatalf("SchemaVersion of an empty database = %d, %d, %v; want 0, %d", cur, latest, err, LatestVersion())
	}
	applied, err := Migrate(ctx, dsn)
	if err != nil || len(applied) != len(migrations) {
		t.Fatalf("first Migrate applied %v, %v; want all %d", applied, err, len(migrations))
	}
	applied, err = Migrate(ctx, dsn)
	if err != nil || len(applied) != 0 {
		t.Fatalf("second Migrate applied %v, %v; want nothing", applied, err)
	}
	if cur, _, err := SchemaVersion(ctx, dsn); err != nil || cur != LatestVersion() {
		t.Fatalf("SchemaVersion after Migrate = %d, %v; want %d", cur, err, LatestVersion())
	}

	// Four nodes migrating a fresh database at once: one applies, the
	// others find it done; nobody fails.
	dsn = newTestDatabase(t, base, false)
	var wg sync.WaitGroup
	results := make([][]Migration, 4)
	errs := make([]error, 4)
	for i := range 4 {
		wg.Go(func() { results[i], errs[i] = Migrate(ctx, dsn) })
	}
	wg.Wait()
	total := 0
	for i := range 4 {
		if errs[i] != nil {
			t.Fatalf("concurrent Migrate %d: %v", i, errs[i])
		}
		total += len(results[i])
	}
	if total != len(migrations) {
		t.Errorf("concurrent Migrates applied %d migrations in all, want %d (each once)", total, len(migrations))
	}
	if cur, _, err := SchemaVersion(ctx, dsn); err != nil || cur != LatestVersion() {
		t.Fatalf("SchemaVersion after concurrent Migrate = %d, %v", cur, err)
	}
	// Migrating a half-migrated schema (tables there, version row not
	// written: a crash in between) works too.
	db := openStore(t, dsn, nil).DB()
	if _, err := db.ExecContext(ctx, `DELETE FROM schema_version`); err != nil {
		t.Fatal(err)
	}
	if applied, err := Migrate(ctx, dsn); err != nil || len(applied) != len(migrations) {
		t.Fatalf("Migrate after a lost version row: %v, %v", applied, err)
	}
}

func TestIntegration_OpenChecksSchema(t *testing.T) {
	base := testServer(t)
	ctx := testCtx(t)
	dsn := newTestDatabase(t, base, false)

	_, err := Open(ctx, Config{DSN: dsn})
	if err == nil || !strings.Contains(err.Error(), "idctl db migrate") {
		t.Fatalf("Open without schema: %v; want a hint to run idctl db migrate", err)
	}
	// Config.Migrate installs it.
	s := openStore(t, dsn, func(c *Config) { c.Migrate = true })
	// A schema behind this build is refused with the same hint.
	if _, err := s.DB().ExecContext(ctx, `DELETE FROM schema_version WHERE version = ?`, LatestVersion()); err != nil {
		t.Fatal(err)
	}
	if LatestVersion() > 1 {
		_, err = Open(ctx, Config{DSN: dsn})
		if err == nil || !strings.Contains(err.Error(), "idctl db migrate") {
			t.Fatalf("Open with an old schema: %v", err)
		}
	}
	if _, err := Migrate(ctx, dsn); err != nil {
		t.Fatal(err)
	}
	// A newer schema (a later build migrated already) is accepted.
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO schema_version VALUES (?, 'from the future', NOW())`, LatestVersion()+1); err != nil {
		t.Fatal(err)
	}
	openStore(t, dsn, nil)

	// A database that does not exist: ErrUnavailable with a hint.
	_, err = Open(ctx, Config{DSN: withDB(t, base, "idgen_no_such_db_x")})
	if !errors.Is(err, segment.ErrUnavailable) || !strings.Contains(err.Error(), "database") {
		t.Fatalf("Open on a missing database: %v", err)
	}
}

func TestOpenInvalidConfig(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{}, "DSN"},
		{Config{DSN: "not a dsn"}, "DSN"},
		{Config{DSN: "u:p@tcp(h:1)/"}, "DSN"},
		{Config{DSN: "u:p@tcp(h:1)/db", Timeout: -1}, "Timeout"},
		{Config{DSN: "u:p@tcp(h:1)/db", MaxOpenConns: -1}, "MaxOpenConns"},
		{Config{DSN: "u:p@tcp(h:1)/db", RequestRetention: -time.Second}, "RequestRetention"},
	} {
		_, err := Open(ctx, tc.cfg)
		if !errors.Is(err, segment.ErrInvalid) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("Open(%+v) = %v; want ErrInvalid naming %s", tc.cfg, err, tc.field)
		}
		if err != nil && strings.Contains(err.Error(), ":p@") {
			t.Errorf("error shows the password: %v", err)
		}
	}
}

// TestIntegration_ThreeNodes runs three stores (three nodes) on one
// database with 32 goroutines: UNORDERED segments never overlap, every
// ORDERED caller sees strictly increasing numbers per key, and the union
// for each key has no gap.
func TestIntegration_ThreeNodes(t *testing.T) {
	dsn := newTestDatabase(t, testServer(t), true)
	nodes := []*Store{openStore(t, dsn, nil), openStore(t, dsn, nil), openStore(t, dsn, nil)}
	const startNum = 1000
	b := mustCreate(t, nodes[0], segment.Biz{Name: "three.nodes", StartNum: startNum, Channel: segment.ChannelOrdered})
	keys := []string{"k0", "用户:1", "\U0001F600", "polygenelubricants", ""}

	const goroutines, perGoroutine = 32, 40
	type orderedResult struct {
		key string
		r   segment.Range
	}
	segs := make([][]segment.Range, goroutines)
	ords := make([][]orderedResult, goroutines)
	errs := make([]error, goroutines)
	ctx := testCtx(t)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			node := nodes[g%len(nodes)]
			last := map[string]int64{}
			for i := range perGoroutine {
				r, err := node.ReserveSegment(ctx, b.Name, int64(1+(g+i)%50))
				if err != nil {
					errs[g] = err
					return
				}
				segs[g] = append(segs[g], r)

				key := keys[(g+i)%len(keys)]
				req := segment.OrderedRequest{Biz: b.Name, SubKey: key, Count: int64(1 + i%4), StartNum: startNum}
				if i%3 == 0 {
					req.RequestID = fmt.Sprintf("g%d-i%d", g, i)
				}
				o, err := node.ReserveOrdered(ctx, req)
				if err != nil {
					errs[g] = err
					return
				}
				if o.Len() != req.Count {
					errs[g] = fmt.Errorf("asked %d, got %v", req.Count, o)
					return
				}
				if o.First <= last[key] {
					errs[g] = fmt.Errorf("key %q: %v not above %d seen before", key, o, last[key])
					return
				}
				last[key] = o.Last
				ords[g] = append(ords[g], orderedResult{key, o})
			}
		})
	}
	wg.Wait()
	var allSegs []segment.Range
	byKey := map[string][]segment.Range{}
	for g := range goroutines {
		if errs[g] != nil {
			t.Fatalf("goroutine %d: %v", g, errs[g])
		}
		allSegs = append(allSegs, segs[g]...)
		for _, o := range ords[g] {
			byKey[o.key] = append(byKey[o.key], o.r)
		}
	}
	checkRanges(t, "UNORDERED", allSegs, startNum, true)
	for k, rs := range byKey {
		checkRanges(t, fmt.Sprintf("ORDERED key %q", k), rs, startNum, true)
	}
	// Every row is where the shard mapping puts it.
	rep, err := CheckShards(ctx, nodes[0].DB(), 0)
	if err != nil || rep.Misplaced != 0 || rep.Rows != int64(len(keys)) {
		t.Fatalf("CheckShards: %+v, %v", rep, err)
	}
	for _, k := range keys {
		var n int
		err := nodes[0].DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM `+mysqldb.OrderedTable(Shard(k))+` WHERE biz = ? AND sub_key = ?`, b.Name, []byte(k)).Scan(&n)
		if err != nil || n != 1 {
			t.Errorf("key %q not in %s: %d, %v", k, mysqldb.OrderedTable(Shard(k)), n, err)
		}
	}
}

func TestIntegration_RequestIDs(t *testing.T) {
	dsn := newTestDatabase(t, testServer(t), true)
	s1, s2 := openStore(t, dsn, nil), openStore(t, dsn, nil)
	b := mustCreate(t, s1, segment.Biz{Name: "req", StartNum: 10})
	ctx := testCtx(t)

	req := segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: 3, StartNum: 10, RequestID: "r-1"}
	firstR, err := s1.ReserveOrderedReplay(ctx, req)
	first, replayed := firstR.Range, firstR.Replayed
	if err != nil || replayed || first != (segment.Range{First: 10, Last: 12}) {
		t.Fatalf("first: %v %v %v", first, replayed, err)
	}
	// A retry, on the other node: the same range, marked as a replay.
	againR, err := s2.ReserveOrderedReplay(ctx, req)
	again, replayed := againR.Range, againR.Replayed
	if err != nil || !replayed || again != first {
		t.Fatalf("retry: %v %v %v; want %v replayed", again, replayed, err, first)
	}
	// A different id gets the next range.
	req2 := req
	req2.RequestID = "r-2"
	next, err := s2.ReserveOrdered(ctx, req2)
	if err != nil || next != (segment.Range{First: 13, Last: 15}) {
		t.Fatalf("r-2: %v %v", next, err)
	}
	// Reusing an id for another request is refused and reserves nothing.
	for _, bad := range []segment.OrderedRequest{
		{Biz: b.Name, SubKey: "other", Count: 3, RequestID: "r-1"},
		{Biz: b.Name, SubKey: "k", Count: 4, RequestID: "r-1"},
	} {
		if _, err := s1.ReserveOrdered(ctx, bad); !errors.Is(err, segment.ErrRequestMismatch) {
			t.Fatalf("reused id %+v: %v; want ErrRequestMismatch", bad, err)
		}
	}
	if r, err := s1.ReserveOrdered(ctx, segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: 1, StartNum: 10}); err != nil || r.First != 16 {
		t.Fatalf("after mismatches: %v %v; want 16", r, err)
	}
	// An unknown business with a request id stores nothing.
	if _, err := s1.ReserveOrdered(ctx, segment.OrderedRequest{Biz: "nope", SubKey: "k", Count: 1, RequestID: "x"}); !errors.Is(err, segment.ErrUnknownBiz) {
		t.Fatalf("unknown biz: %v", err)
	}
	var n int
	if err := s1.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM ordered_request WHERE biz = 'nope'`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("request rows for an unknown biz: %d %v", n, err)
	}
	// Invalid UTF-8 cannot be hashed as Java would: refused.
	if _, err := s1.ReserveOrdered(ctx, segment.OrderedRequest{Biz: b.Name, SubKey: "\xff", Count: 1}); !errors.Is(err, segment.ErrInvalid) {
		t.Fatalf("invalid UTF-8 sub key: %v", err)
	}
}

func TestIntegration_RequestCleanup(t *testing.T) {
	dsn := newTestDatabase(t, testServer(t), true)
	s := openStore(t, dsn, func(c *Config) { c.RequestRetention = time.Hour; c.CleanupBatch = 7 })
	b := mustCreate(t, s, segment.Biz{Name: "cleanup"})
	ctx := testCtx(t)
	const rows = 30
	for i := range rows {
		if _, err := s.ReserveOrdered(ctx, segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: 1, RequestID: fmt.Sprint("r", i)}); err != nil {
			t.Fatal(err)
		}
	}
	// Age 20 of them past the retention.
	if _, err := s.DB().ExecContext(ctx, `UPDATE ordered_request SET created_at = created_at - INTERVAL 2 HOUR ORDER BY created_at LIMIT 20`); err != nil {
		t.Fatal(err)
	}
	count := func() int {
		var n int
		if err := s.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM ordered_request`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	// While another node holds the cleanup lock, this one skips.
	other := openStore(t, dsn, nil)
	conn, err := other.DB().Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	release, err := getLock(ctx, conn, lockName("cleanup", s.dbName), 0)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := s.CleanupRequests(ctx); err != nil || n != 0 || count() != rows {
		t.Fatalf("cleanup while another node holds the lock: deleted %d, %v, %d rows left", n, err, count())
	}
	release()
	conn.Close()

	n, err := s.CleanupRequests(ctx)
	if err != nil || n != 20 || count() != rows-20 {
		t.Fatalf("cleanup: deleted %d, %v, %d rows left; want 20 deleted in batches of 7", n, err, count())
	}
	// An expired id is forgotten: the same id now reserves anew.
	var expired string
	var kept string
	if err := s.DB().QueryRowContext(ctx, `SELECT request_id FROM ordered_request ORDER BY created_at LIMIT 1`).Scan(&kept); err != nil {
		t.Fatal(err)
	}
	for i := range rows {
		if id := fmt.Sprint("r", i); id != kept {
			var c int
			_ = s.DB().QueryRowContext(ctx, `SELECT COUNT(*) FROM ordered_request WHERE request_id = ?`, []byte(id)).Scan(&c)
			if c == 0 {
				expired = id
				break
			}
		}
	}
	r, err := s.ReserveOrderedReplay(ctx, segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: 1, RequestID: expired})
	if err != nil || r.Replayed || r.First != rows+1 {
		t.Fatalf("expired id %q again: %+v %v; want a new range %d", expired, r, err, rows+1)
	}
	// The background loop does the same by itself.
	bg := openStore(t, dsn, func(c *Config) { c.RequestRetention = time.Millisecond; c.CleanupInterval = 50 * time.Millisecond })
	deadline := time.Now().Add(30 * time.Second)
	for count() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("background cleanup left %d rows", count())
		}
		time.Sleep(50 * time.Millisecond)
	}
	bg.Close()
}

// TestIntegration_SegmentRegressed: a max_id moved backwards under a
// running store (a failover to a lagging replica) comes back as it is;
// refusing it is the processor's job, so the store must not hide it.
func TestIntegration_SegmentRegressed(t *testing.T) {
	dsn := newTestDatabase(t, testServer(t), true)
	s := openStore(t, dsn, nil)
	b := mustCreate(t, s, segment.Biz{Name: "regress"})
	ctx := testCtx(t)
	for i := range 5 {
		if r, err := s.ReserveSegment(ctx, b.Name, 100); err != nil || r.First != int64(i*100+1) {
			t.Fatalf("segment %d: %v %v", i, r, err)
		}
	}
	if _, err := s.DB().ExecContext(ctx, `UPDATE segment SET max_id = 150 WHERE biz = ?`, b.Name); err != nil {
		t.Fatal(err)
	}
	r, err := s.ReserveSegment(ctx, b.Name, 100)
	if err != nil || r != (segment.Range{First: 151, Last: 250}) {
		t.Fatalf("after the regression: %v %v; want exactly 151..250", r, err)
	}
	// Even to zero and below.
	if _, err := s.DB().ExecContext(ctx, `UPDATE segment SET max_id = -10 WHERE biz = ?`, b.Name); err != nil {
		t.Fatal(err)
	}
	if r, err := s.ReserveSegment(ctx, b.Name, 10); err != nil || r != (segment.Range{First: -9, Last: 0}) {
		t.Fatalf("regression below zero: %v %v; want -9..0", r, err)
	}
	// ORDERED likewise.
	req := segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: 5}
	if _, err := s.ReserveOrdered(ctx, req); err != nil {
		t.Fatal(err)
	}
	if _, err := s.DB().ExecContext(ctx, `UPDATE `+mysqldb.OrderedTable(Shard("k"))+` SET num = 2 WHERE biz = ?`, b.Name); err != nil {
		t.Fatal(err)
	}
	if r, err := s.ReserveOrdered(ctx, req); err != nil || r != (segment.Range{First: 3, Last: 7}) {
		t.Fatalf("ordered after regression: %v %v", r, err)
	}
}

func TestIntegration_Exhausted(t *testing.T) {
	dsn := newTestDatabase(t, testServer(t), true)
	s := openStore(t, dsn, nil)
	b := mustCreate(t, s, segment.Biz{Name: "full"})
	ctx := testCtx(t)
	if _, err := s.DB().ExecContext(ctx, `UPDATE segment SET max_id = ? WHERE biz = ?`, int64(math.MaxInt64-5), b.Name); err != nil {
		t.Fatal(err)
	}
	if r, err := s.ReserveSegment(ctx, b.Name, 5); err != nil || r.Last != math.MaxInt64 {
		t.Fatalf("last segment: %v %v", r, err)
	}
	if _, err := s.ReserveSegment(ctx, b.Name, 1); !errors.Is(err, segment.ErrExhausted) {
		t.Fatalf("past 2^63-1: %v; want ErrExhausted", err)
	}
	if _, err := s.ReserveOrdered(ctx, segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: 1, StartNum: math.MaxInt64}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReserveOrdered(ctx, segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: 1, RequestID: "r"}); !errors.Is(err, segment.ErrExhausted) {
		t.Fatalf("ordered past 2^63-1: %v; want ErrExhausted", err)
	}
}

// TestIntegration_LockWait: a row lock held longer than Timeout ends the
// reservation with ErrUnavailable after about Timeout, not after the
// server's default 50 s lock wait.
func TestIntegration_LockWait(t *testing.T) {
	dsn := newTestDatabase(t, testServer(t), true)
	// The session's innodb_lock_wait_timeout is half of Timeout: the server
	// gives up first (error 1205) and the connection stays usable.
	const timeout = 3 * time.Second
	s := openStore(t, dsn, func(c *Config) { c.Timeout = timeout })
	b := mustCreate(t, s, segment.Biz{Name: "locked"})
	ctx := testCtx(t)
	if _, err := s.ReserveOrdered(ctx, segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: 1}); err != nil {
		t.Fatal(err)
	}
	other := openStore(t, dsn, func(c *Config) { c.Timeout = time.Minute })
	tx, err := other.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback() //nolint:errcheck
	if _, err := tx.ExecContext(ctx, `SELECT num FROM `+mysqldb.OrderedTable(Shard("k"))+` WHERE biz = ? AND sub_key = 'k' FOR UPDATE`, b.Name); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, `SELECT max_id FROM segment WHERE biz = ? FOR UPDATE`, b.Name); err != nil {
		t.Fatal(err)
	}
	calls := map[string]func() error{
		"ordered": func() error {
			_, err := s.ReserveOrdered(ctx, segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: 1})
			return err
		},
		"ordered with request id": func() error {
			_, err := s.ReserveOrdered(ctx, segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: 1, RequestID: "r"})
			return err
		},
		"segment": func() error {
			_, err := s.ReserveSegment(ctx, b.Name, 10)
			return err
		},
	}
	var wg sync.WaitGroup
	for name, call := range calls {
		wg.Go(func() {
			start := time.Now()
			err := call()
			took := time.Since(start)
			if !errors.Is(err, segment.ErrUnavailable) {
				t.Errorf("%s behind a lock: %v; want ErrUnavailable", name, err)
			}
			if took > timeout+3*time.Second {
				t.Errorf("%s behind a lock took %v, Timeout is %v", name, took, timeout)
			}
			if mysqlerr.Number(err) != mysqlerr.LockWaitTimeout {
				t.Errorf("%s behind a lock: %v; want the server's lock wait timeout (1205) before the client's deadline", name, err)
			}
			t.Logf("%s: %v after %v", name, err, took.Round(time.Millisecond))
		})
	}
	wg.Wait()
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	// The request id of the failed attempt was rolled back with it.
	rv, err := s.ReserveOrderedReplay(ctx, segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: 1, RequestID: "r"})
	r, replayed := rv.Range, rv.Replayed
	if err != nil || replayed || r.First != 2 {
		t.Fatalf("after the lock: %v replayed=%v %v; want 2..2, fresh", r, replayed, err)
	}
}

func TestIntegration_MisplacedShards(t *testing.T) {
	dsn := newTestDatabase(t, testServer(t), true)
	s := openStore(t, dsn, nil)
	ctx := testCtx(t)
	// A row where (h & 0x7fffffff) % 64 puts it, as a Java service with
	// that mapping would have left it.
	key := "user:1"
	if Shard(key) == maskShard(key) {
		t.Fatal("pick a key whose mappings differ")
	}
	if _, err := s.DB().ExecContext(ctx, `INSERT INTO `+mysqldb.OrderedTable(maskShard(key))+` (biz, sub_key, num) VALUES ('old', ?, 42)`, []byte(key)); err != nil {
		t.Fatal(err)
	}
	rep, err := CheckShards(ctx, s.DB(), 0)
	if err != nil || rep.Misplaced != 1 || rep.MaskPlaced != 1 {
		t.Fatalf("CheckShards: %+v %v", rep, err)
	}
	_, err = Open(ctx, Config{DSN: dsn})
	if err == nil || !containsAll(err.Error(), "0x7fffffff", "user:1") {
		t.Fatalf("Open over misplaced data: %v; want a refusal that explains", err)
	}
	openStore(t, dsn, func(c *Config) { c.ShardCheckRows = -1 }) // unless told to skip the check
}

// TestIntegration_LeastPrivilege runs the store under the runtime grant of
// README.md and the migration under the migration grant, so the
// documented grants are known to be enough.
func TestIntegration_LeastPrivilege(t *testing.T) {
	base := testServer(t)
	dsn := newTestDatabase(t, base, false)
	ctx := testCtx(t)
	db := openStore(t, dsn, func(c *Config) { c.Migrate = true }).DB()
	dbName := strings.TrimPrefix(dsn[strings.LastIndex(dsn, "/"):], "/")
	if i := strings.IndexByte(dbName, '?'); i >= 0 {
		dbName = dbName[:i]
	}
	suffix := strings.TrimPrefix(dbName, "idgen_test_")
	users := map[string][]string{
		"idgen_rt_" + suffix: {
			"GRANT SELECT, INSERT, UPDATE ON %s.* TO %s",
			"GRANT DELETE ON %s.ordered_request TO %s",
		},
		"idgen_mg_" + suffix: {
			"GRANT SELECT, INSERT, UPDATE, CREATE, ALTER, INDEX ON %s.* TO %s",
		},
	}
	for user, grants := range users {
		who := "'" + user + "'@'%'"
		if _, err := db.ExecContext(ctx, "CREATE USER "+who+" IDENTIFIED BY 'pw-"+suffix+"'"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP USER "+who) })
		for _, g := range grants {
			if _, err := db.ExecContext(ctx, fmt.Sprintf(g, quoteIdent(dbName), who)); err != nil {
				t.Fatal(err)
			}
		}
	}
	userDSN := func(user string) string {
		mc, err := driverConfig(dsn, time.Second, nil)
		if err != nil {
			t.Fatal(err)
		}
		mc.User, mc.Passwd = user, "pw-"+suffix
		return mc.FormatDSN()
	}
	// The migration user can (re)run every migration on an empty database.
	if _, err := db.ExecContext(ctx, "DROP TABLE IF EXISTS schema_version"); err != nil {
		t.Fatal(err)
	}
	if applied, err := Migrate(ctx, userDSN("idgen_mg_"+suffix)); err != nil || len(applied) != len(migrations) {
		t.Fatalf("Migrate as the migration user: %v, %v", applied, err)
	}
	// The runtime user can do everything the service does.
	s := openStore(t, userDSN("idgen_rt_"+suffix), func(c *Config) { c.RequestRetention = time.Millisecond })
	if strings.Contains(fmt.Sprint(s.log), "pw-") {
		t.Error("logger fields show the password")
	}
	b := mustCreate(t, s, segment.Biz{Name: "grants"})
	if _, err := s.UpdateBiz(ctx, b.Name, segment.BizUpdate{Step: ptr(int64(5))}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ListBiz(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReserveSegment(ctx, b.Name, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := s.ReserveOrdered(ctx, segment.OrderedRequest{Biz: b.Name, SubKey: "k", Count: 1, RequestID: "r"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	if n, err := s.CleanupRequests(ctx); err != nil || n != 1 {
		t.Fatalf("cleanup as the runtime user: %d, %v", n, err)
	}
	// And no more: DDL is refused, with a hint at the grants.
	_, err := Migrate(ctx, userDSN("idgen_rt_"+suffix))
	if !errors.Is(err, segment.ErrUnavailable) || !strings.Contains(err.Error(), "GRANT") || strings.Contains(err.Error(), "pw-") {
		t.Fatalf("Migrate as the runtime user: %v; want access denied naming the GRANT, without the password", err)
	}
}

func ptr[T any](v T) *T { return &v }

// Schema 4 on a database at schema 3 with a MySQL-held cluster: the
// cluster's row becomes registry 'mysql', as does a row an older build
// inserts afterwards (it names no registry); running it again, or after a
// lost version row, changes nothing.
func TestIntegration_MigrateWorkerRegistry(t *testing.T) {
	ctx := testCtx(t)
	_, db := databaseAtSchema(ctx, t, 3)
	if cur, err := schemaVersionDB(ctx, db); err != nil || cur != 3 {
		t.Fatalf("schema version %d, %v; want 3", cur, err)
	}
	oldRow := `INSERT INTO worker_cluster (cluster, epoch_ms, idc_bits, node_bits, created_ms) VALUES (?, 1, 2, 8, 5)`
	if _, err := db.ExecContext(ctx, oldRow, "old"); err != nil {
		t.Fatal(err)
	}
	v4 := migrationsUpTo(4)
	applied, err := migrateDB(ctx, db, v4)
	if err != nil || len(applied) != 1 || applied[0].Version != 4 {
		t.Fatalf("Migrate from schema 3 applied %v, %v; want version 4", applied, err)
	}
	if _, err := db.ExecContext(ctx, oldRow, "older-build"); err != nil {
		t.Fatal(err)
	}
	registries := func() map[string]string {
		rows, err := db.QueryContext(ctx, `SELECT cluster, registry FROM worker_cluster`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[string]string{}
		for rows.Next() {
			var c, r string
			if err := rows.Scan(&c, &r); err != nil {
				t.Fatal(err)
			}
			out[c] = r
		}
		return out
	}
	if got := registries(); got["old"] != "mysql" || got["older-build"] != "mysql" || len(got) != 2 {
		t.Fatalf("registries after schema 4: %v; want both mysql", got)
	}
	if _, err := db.ExecContext(ctx, `UPDATE worker_cluster SET registry = 'zookeeper' WHERE cluster = 'old'`); err != nil {
		t.Fatal(err)
	}
	if applied, err := migrateDB(ctx, db, v4); err != nil || len(applied) != 0 {
		t.Fatalf("second Migrate applied %v, %v", applied, err)
	}
	// The column is there but the version row is lost: applied again,
	// without touching the rows.
	if _, err := db.ExecContext(ctx, `DELETE FROM schema_version WHERE version = 4`); err != nil {
		t.Fatal(err)
	}
	if applied, err := migrateDB(ctx, db, v4); err != nil || len(applied) != 1 {
		t.Fatalf("Migrate after a lost version row applied %v, %v", applied, err)
	}
	if got := registries(); got["old"] != "zookeeper" {
		t.Fatalf("re-running schema 4 changed a row: %v", got)
	}
}

// TestIntegration_MigrateLeaseNonce: schema 11 on a database at schema 10
// with claimed shards: their rows (and a row an older build inserts
// afterwards, naming no nonce) read as a cleared lease (empty); running it
// again, or after a lost version row, keeps the nonces written since.
func TestIntegration_MigrateLeaseNonce(t *testing.T) {
	ctx := testCtx(t)
	_, db := databaseAtSchema(ctx, t, 10)
	oldRow := `INSERT INTO ordered_shard (shard, epoch, owner, persists, updated_at) VALUES (?, 3, 'old:1', 0, NOW(6))`
	if _, err := db.ExecContext(ctx, oldRow, 1); err != nil {
		t.Fatal(err)
	}
	v11 := migrationsUpTo(11)
	applied, err := migrateDB(ctx, db, v11)
	if err != nil || len(applied) != 1 || applied[0].Version != 11 {
		t.Fatalf("Migrate from schema 10 applied %v, %v; want version 11", applied, err)
	}
	if _, err := db.ExecContext(ctx, oldRow, 2); err != nil {
		t.Fatal(err)
	}
	nonces := func() map[int]string {
		rows, err := db.QueryContext(ctx, `SELECT shard, lease_nonce FROM ordered_shard`)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		out := map[int]string{}
		for rows.Next() {
			var (
				shard int
				n     string
			)
			if err := rows.Scan(&shard, &n); err != nil {
				t.Fatal(err)
			}
			out[shard] = n
		}
		return out
	}
	if got := nonces(); len(got) != 2 || got[1] != "" || got[2] != "" {
		t.Fatalf("lease nonces after schema 11: %v; want shards 1 and 2 at ''", got)
	}
	const nonce = "0123456789abcdef0123456789abcdef"
	if _, err := db.ExecContext(ctx, `UPDATE ordered_shard SET lease_nonce = ? WHERE shard = 1`, nonce); err != nil {
		t.Fatalf("a nonce of 32 hex characters: %v", err)
	}
	if applied, err := migrateDB(ctx, db, v11); err != nil || len(applied) != 0 {
		t.Fatalf("second Migrate applied %v, %v", applied, err)
	}
	if _, err := db.ExecContext(ctx, `DELETE FROM schema_version WHERE version = 11`); err != nil {
		t.Fatal(err)
	}
	if applied, err := migrateDB(ctx, db, v11); err != nil || len(applied) != 1 {
		t.Fatalf("Migrate after a lost version row applied %v, %v", applied, err)
	}
	if got := nonces(); got[1] != nonce {
		t.Fatalf("re-running schema 11 changed a row: %v", got)
	}
}
