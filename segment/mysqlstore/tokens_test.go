package mysqlstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"database/sql"
	"slices"
	"testing"
	"time"

	"github.com/idgen/idgen/segment"
)

// migrationsUpTo returns the migrations up to version v, to build the
// schema of an older build.
func migrationsUpTo(v int) []Migration {
	var out []Migration
	for _, m := range migrations {
		if m.Version <= v {
			out = append(out, m)
		}
	}
	return out
}

// databaseAtSchema creates a test database at schema version v (the
// schema of an older build) and returns its DSN and a connection to it,
// closed when the test ends.
func databaseAtSchema(ctx context.Context, t *testing.T, v int) (string, *sql.DB) {
	t.Helper()
	dsn := newTestDatabase(t, testServer(t), false)
	db, _, err := openDB(dsn, migrateStatementTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if _, err := migrateDB(ctx, db, migrationsUpTo(v)); err != nil {
		t.Fatal(err)
	}
	return dsn, db
}

// TestIntegration_MigrateBizTokens: schema 5 on a database at schema 4
// with businesses in it: they read as before (no quota, no burst, no
// tokens; key and plugins intact), the new columns have the documented
// types, secret_key takes a wrapped key afterwards, and the migration is
// idempotent: re-run after a lost version row, or after a crash between
// adding the columns and widening secret_key, it finishes the job without
// touching the rows.
func TestIntegration_MigrateBizTokens(t *testing.T) {
	ctx := testCtx(t)
	dsn, db := databaseAtSchema(ctx, t, 4)
	plainKey := bytes.Repeat([]byte{0x5a}, segment.KeySize)
	oldRow := `INSERT INTO biz (name, channel, step, low_water_pct, start_num, fallback, rate_limit, description,
  obfuscate, format, code_min_length, plugins, secret_key, issued, created_at, updated_at)
  VALUES (?, 0, 100, 20, 1, 0, 0, 'from schema 4', 1, 1, 6, 'audit', ?, 1, ?, ?)`
	ts := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, name := range []string{"old", "old-empty-tokens"} {
		if _, err := db.ExecContext(ctx, oldRow, name, plainKey, ts, ts); err != nil {
			t.Fatal(err)
		}
	}
	applied, err := migrateDB(ctx, db, migrationsUpTo(5))
	if err != nil || len(applied) != 1 || applied[0].Version != 5 {
		t.Fatalf("Migrate from schema 4 applied %v, %v; want version 5", applied, err)
	}
	checkColumns := func(when string) {
		t.Helper()
		want := map[string]struct {
			typ      string
			length   int64
			nullable string
		}{
			"id_quota":   {"bigint", 0, "NO"},
			"id_burst":   {"bigint", 0, "NO"},
			"tokens":     {"text", 65535, "YES"},
			"secret_key": {"varbinary", secretKeyWidth, "NO"},
		}
		for col, w := range want {
			var typ, nullable string
			var length sql.NullInt64
			err := db.QueryRowContext(ctx, `SELECT DATA_TYPE, CHARACTER_MAXIMUM_LENGTH, IS_NULLABLE FROM information_schema.COLUMNS
  WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = 'biz' AND COLUMN_NAME = ?`, col).Scan(&typ, &length, &nullable)
			if err != nil {
				t.Fatalf("%s: column biz.%s: %v", when, col, err)
			}
			if typ != w.typ || length.Int64 != w.length || nullable != w.nullable {
				t.Errorf("%s: biz.%s is %s(%d) nullable %s; want %s(%d) nullable %s",
					when, col, typ, length.Int64, nullable, w.typ, w.length, w.nullable)
			}
		}
	}
	checkColumns("after schema 5")
	if _, err := db.ExecContext(ctx, `UPDATE biz SET tokens = '' WHERE name = 'old-empty-tokens'`); err != nil {
		t.Fatal(err)
	}

	// The store needs the latest schema (6 adds ordered_mode): the rows
	// from schema 4 read as they behaved.
	if _, err := MigrateDB(ctx, db); err != nil {
		t.Fatalf("Migrate to the latest schema: %v", err)
	}
	s := openStore(t, dsn, nil)
	for _, name := range []string{"old", "old-empty-tokens"} {
		b, err := s.GetBiz(ctx, name)
		if err != nil {
			t.Fatalf("GetBiz(%s) after schema 5: %v", name, err)
		}
		if b.IDQuota != 0 || b.IDBurst != 0 || b.Tokens != nil || !bytes.Equal(b.Key, plainKey) ||
			!slices.Equal(b.Plugins, []string{"audit"}) || !b.Issued || b.Description != "from schema 4" ||
			b.OrderedMode != segment.OrderedGapless {
			t.Errorf("GetBiz(%s) after schema 5: %+v; want no quota, burst or tokens and the old settings", name, b)
		}
	}

	// A crash after the columns were added, before secret_key was
	// widened: the next run widens it.
	if _, err := db.ExecContext(ctx, `ALTER TABLE biz MODIFY COLUMN secret_key VARBINARY(32) NOT NULL DEFAULT ''`); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, `DELETE FROM schema_version WHERE version = 5`); err != nil {
		t.Fatal(err)
	}
	if applied, err := MigrateDB(ctx, db); err != nil || len(applied) != 1 {
		t.Fatalf("Migrate after a crash in schema 5 applied %v, %v", applied, err)
	}
	checkColumns("after re-running schema 5")

	// The widened column holds a wrapped key; tokens are stored.
	wrapped := bytes.Repeat([]byte{0xc3}, segment.WrappedKeySize)
	h := sha256.Sum256([]byte("secret"))
	tok := segment.BizToken{ID: "ops", Label: "ops team", Hash: h[:]}
	quota := int64(900)
	if _, err := s.UpdateBiz(ctx, "old", segment.BizUpdate{Key: wrapped, AddToken: &tok, IDQuota: &quota}); err != nil {
		t.Fatalf("UpdateBiz with a wrapped key and a token: %v", err)
	}
	// Re-running the migration (lost version row) changes no row.
	if _, err := db.ExecContext(ctx, `DELETE FROM schema_version WHERE version = 5`); err != nil {
		t.Fatal(err)
	}
	if applied, err := MigrateDB(ctx, db); err != nil || len(applied) != 1 {
		t.Fatalf("Migrate after a lost version row applied %v, %v", applied, err)
	}
	if applied, err := MigrateDB(ctx, db); err != nil || len(applied) != 0 {
		t.Fatalf("Migrate at the latest schema applied %v, %v", applied, err)
	}
	b, err := s.GetBiz(ctx, "old")
	if err != nil || !bytes.Equal(b.Key, wrapped) || b.IDQuota != 900 || len(b.Tokens) != 1 ||
		b.Tokens[0].ID != "ops" || !bytes.Equal(b.Tokens[0].Hash, h[:]) {
		t.Fatalf("after re-running schema 5: %+v, %v; want the wrapped key, quota 900 and token ops", b, err)
	}
}

// TestIntegration_TokensColumnCorrupt: a tokens value that is not a JSON
// list (edited by hand) fails GetBiz naming the business and the column,
// instead of reading as a business without tokens (which would open it to
// the shared client token).
func TestIntegration_TokensColumnCorrupt(t *testing.T) {
	ctx := testCtx(t)
	s := openStore(t, newTestDatabase(t, testServer(t), true), nil)
	mustCreate(t, s, segment.Biz{Name: "corrupt"})
	if _, err := s.DB().ExecContext(ctx, `UPDATE biz SET tokens = '{not json' WHERE name = 'corrupt'`); err != nil {
		t.Fatal(err)
	}
	_, err := s.GetBiz(ctx, "corrupt")
	if err == nil || !containsAll(err.Error(), `"corrupt"`, "tokens") {
		t.Fatalf("GetBiz with a corrupt tokens column: %v; want an error naming the business and the column", err)
	}
	if _, err := s.ListBiz(ctx); err == nil {
		t.Fatal("ListBiz with a corrupt tokens column succeeded")
	}
}
