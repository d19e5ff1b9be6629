package mysqlstore

import (
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/mysqldb"
	"github.com/idgen/idgen/segment"
)

// TestIntegration_MigrateRequestScopes: schema 7 on a database at schema 6
// widens ordered_request.request_id for scoped ids. A request id stored
// before (unscoped, up to 128 bytes) still replays for a caller without a
// credential and is not found in any scope; the longest scoped id fits.
func TestIntegration_MigrateRequestScopes(t *testing.T) {
	ctx := testCtx(t)
	dsn, db := databaseAtSchema(ctx, t, 6)
	// What a schema-6 build leaves: a business, its key's row and a
	// request id of the longest length, unscoped.
	ts := time.Now().UTC()
	if _, err := db.ExecContext(ctx, `INSERT INTO biz (name, channel, step, low_water_pct, start_num, fallback, rate_limit,
  description, created_at, updated_at) VALUES ('old', 1, 100, 20, 1, 0, 0, 'from schema 6', ?, ?)`, ts, ts); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO "+mysqldb.OrderedTable(Shard("k"))+" (biz, sub_key, num) VALUES ('old', 'k', 2)"); err != nil {
		t.Fatal(err)
	}
	oldID := strings.Repeat("o", segment.MaxRequestIDLen)
	if _, err := db.ExecContext(ctx, "INSERT INTO ordered_request (biz, request_id, sub_key, `count`, `first`, `last`, created_at) VALUES ('old', ?, 'k', 2, 1, 2, ?)",
		[]byte(oldID), ts); err != nil {
		t.Fatal(err)
	}
	old := segment.OrderedRequest{Biz: "old", SubKey: "k", Count: 2, RequestID: oldID}
	first := segment.Range{First: 1, Last: 2}
	if _, err := MigrateDB(ctx, db); err != nil {
		t.Fatalf("Migrate from schema 6: %v", err)
	}
	s := openStore(t, dsn, nil)
	if r, err := s.ReserveOrderedReplay(ctx, old); err != nil || !r.Replayed || r.Range != first {
		t.Fatalf("retry of a schema-6 request id: %+v, %v; want %v replayed", r, err, first)
	}
	scoped := old
	scoped.RequestScope = strings.Repeat("s", segment.MaxRequestScopeLen)
	r, err := s.ReserveOrderedReplay(ctx, scoped)
	if err != nil || r.Replayed || r.First <= first.Last {
		t.Fatalf("the longest id in the longest scope: %+v, %v; want a new range above %v", r, err, first)
	}
	if again, err := s.ReserveOrderedReplay(ctx, scoped); err != nil || !again.Replayed || again.Range != r.Range {
		t.Fatalf("retry in its scope: %+v, %v; want %v replayed", again, err, r.Range)
	}
	// A re-run after a lost version row changes nothing.
	if _, err := db.ExecContext(ctx, `DELETE FROM schema_version WHERE version = 7`); err != nil {
		t.Fatal(err)
	}
	if applied, err := MigrateDB(ctx, db); err != nil || len(applied) != 1 {
		t.Fatalf("Migrate after a lost version row applied %v, %v", applied, err)
	}
	if again, err := s.ReserveOrderedReplay(ctx, scoped); err != nil || !again.Replayed || again.Range != r.Range {
		t.Fatalf("retry after re-running schema 7: %+v, %v; want %v replayed", again, err, r.Range)
	}
}
