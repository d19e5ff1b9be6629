package mysqlstore

import (
	"cmp"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/idgen/idgen/segment"
)

// testServer returns the DSN prefix of the test server (a DSN without the
// database name), or skips the test.
func testServer(t testing.TB) string {
	t.Helper()
	base := os.Getenv("IDGEN_TEST_MYSQL")
	if base == "" {
		t.Skip("IDGEN_TEST_MYSQL not set: run ./build.sh test")
	}
	return base
}

// newTestDatabase creates a database with a random name on the server
// whose DSN prefix is base, drops it when the test ends, and returns its
// DSN. With migrate it also installs the schema.
func newTestDatabase(t testing.TB, base string, migrate bool) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatal(err)
	}
	name := "idgen_test_" + hex.EncodeToString(b[:])
	root := openRoot(t, base)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := root.ExecContext(ctx, "CREATE DATABASE "+quoteIdent(name)); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		if _, err := root.ExecContext(ctx, "DROP DATABASE IF EXISTS "+quoteIdent(name)); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	dsn := withDB(t, base, name)
	if migrate {
		mctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if _, err := Migrate(mctx, dsn); err != nil {
			t.Fatalf("Migrate: %v", err)
		}
	}
	return dsn
}

// openRoot opens the server without a database; closed at cleanup.
func openRoot(t testing.TB, base string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func withDB(t testing.TB, base, name string) string {
	t.Helper()
	mc, err := mysql.ParseDSN(base)
	if err != nil {
		t.Fatalf("IDGEN_TEST_MYSQL: %v", err)
	}
	mc.DBName = name
	return mc.FormatDSN()
}

// openStore opens a Store on dsn (closed at cleanup); edit adjusts the
// configuration.
func openStore(t testing.TB, dsn string, edit func(*Config)) *Store {
	t.Helper()
	cfg := Config{DSN: dsn, CleanupInterval: -1}
	if edit != nil {
		edit(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := Open(ctx, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustCreate(t testing.TB, s *Store, b segment.Biz) segment.Biz {
	t.Helper()
	got, err := s.CreateBiz(testCtx(t), b)
	if err != nil {
		t.Fatalf("CreateBiz(%+v): %v", b, err)
	}
	return got
}

// checkCover fails unless the ranges are disjoint and cover first..N
// without a gap (gapFree) or are merely disjoint.
func checkRanges(t testing.TB, what string, rs []segment.Range, first int64, gapFree bool) {
	t.Helper()
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b segment.Range) int { return cmp.Compare(a.First, b.First) })
	next := first
	for _, r := range rs {
		switch {
		case r.Last < r.First:
			t.Fatalf("%s: empty range %v", what, r)
		case r.First < next:
			t.Fatalf("%s: range %v overlaps the one before (next free %d): duplicate IDs", what, r, next)
		case gapFree && r.First != next:
			t.Fatalf("%s: range %v leaves a gap after %d", what, r, next-1)
		}
		next = r.Last + 1
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}

// quoteIdent quotes a MySQL identifier.
func quoteIdent(s string) string {
	return "`" + strings.ReplaceAll(s, "`", "``") + "`"
}
