package mysqlstore

import (
	"testing"
	"time"

	"github.com/idgen/idgen/segment"
)

// TestIntegration_MigrateBizOrderedMode: schema 6 on a database at schema
// 5 adds biz.ordered_mode; a business from before reads as gapless (how
// it behaved) and can be set to cached; a re-run after a lost version row
// keeps the stored mode.
func TestIntegration_MigrateBizOrderedMode(t *testing.T) {
	ctx := testCtx(t)
	dsn, db := databaseAtSchema(ctx, t, 5)
	ts := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	if _, err := db.ExecContext(ctx, `INSERT INTO biz (name, channel, step, low_water_pct, start_num, fallback, rate_limit,
  description, created_at, updated_at) VALUES ('old', 1, 100, 20, 1, 0, 0, 'from schema 5', ?, ?)`, ts, ts); err != nil {
		t.Fatal(err)
	}
	if _, err := MigrateDB(ctx, db); err != nil {
		t.Fatalf("Migrate from schema 5: %v", err)
	}
	s := openStore(t, dsn, nil)
	b, err := s.GetBiz(ctx, "old")
	if err != nil || b.OrderedMode != segment.OrderedGapless || b.Channel != segment.ChannelOrdered {
		t.Fatalf("GetBiz(old) after schema 6: %+v, %v; want ordered, gapless", b, err)
	}
	cached := segment.OrderedCached
	if _, err := s.UpdateBiz(ctx, "old", segment.BizUpdate{OrderedMode: &cached}); err != nil {
		t.Fatalf("UpdateBiz ordered_mode cached: %v", err)
	}
	var raw int
	if err := db.QueryRowContext(ctx, `SELECT ordered_mode FROM biz WHERE name = 'old'`).Scan(&raw); err != nil || raw != 1 {
		t.Fatalf("biz.ordered_mode is %d, %v; want 1 (cached)", raw, err)
	}
	if _, err := db.ExecContext(ctx, `DELETE FROM schema_version WHERE version = 6`); err != nil {
		t.Fatal(err)
	}
	if applied, err := MigrateDB(ctx, db); err != nil || len(applied) != 1 {
		t.Fatalf("Migrate after a lost version row applied %v, %v", applied, err)
	}
	if b, err := s.GetBiz(ctx, "old"); err != nil || b.OrderedMode != segment.OrderedCached {
		t.Fatalf("re-running schema 6 changed the mode: %v, %v", b.OrderedMode, err)
	}
}
