package mysqlstore

import (
	"slices"
	"testing"
	"time"

	"github.com/idgen/idgen/segment"
)

// TestIntegration_MigrateBizChannels: schema 8 on a database at schema 6
// with businesses in it: a plain one keeps every built-in channel (its
// callers keep working), an obfuscated one serves its own channel only;
// a row an older build inserts afterwards (it names no channels) reads by
// the same rule; a list written by this build round-trips; a malformed
// list edited by hand is refused with the fix named.
func TestIntegration_MigrateBizChannels(t *testing.T) {
	ctx := testCtx(t)
	dsn, db := databaseAtSchema(ctx, t, 6)
	oldRow := `INSERT INTO biz (name, channel, step, low_water_pct, start_num, fallback, rate_limit, description,
  obfuscate, format, code_min_length, plugins, secret_key, issued, created_at, updated_at)
  VALUES (?, ?, 100, 20, 1, 0, 0, 'from schema 6', ?, ?, 6, '', ?, 1, ?, ?)`
	ts := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	key := segment.NewSecretKey()
	insert := func(name string, ch segment.Channel, obf bool, format segment.Format) {
		t.Helper()
		if _, err := db.ExecContext(ctx, oldRow, name, int(ch), obf, int(format), []byte(key), ts, ts); err != nil {
			t.Fatal(err)
		}
	}
	insert("plain", segment.ChannelSnowflake, false, segment.FormatInt)
	insert("obf", segment.ChannelUnordered, true, segment.FormatInt)
	applied, err := MigrateDB(ctx, db)
	if err != nil || !slices.ContainsFunc(applied, func(m Migration) bool { return m.Version == 8 }) {
		t.Fatalf("Migrate from schema 6 applied %v, %v; want version 8 among them", applied, err)
	}
	insert("older-build-code", segment.ChannelOrdered, false, segment.FormatCode)

	s := openStore(t, dsn, nil)
	U, O, S := segment.ChannelUnordered, segment.ChannelOrdered, segment.ChannelSnowflake
	for name, want := range map[string][]segment.Channel{
		"plain":            {U, O, S},
		"obf":              {U},
		"older-build-code": {O},
	} {
		b, err := s.GetBiz(ctx, name)
		if err != nil || !slices.Equal(b.Channels, want) {
			t.Errorf("GetBiz(%s) after schema 8: channels %v, %v; want %v", name, b.Channels, err, want)
		}
	}
	// Any update writes the list out; it reads back the same.
	if _, err := s.UpdateBiz(ctx, "plain", segment.BizUpdate{Channels: &[]segment.Channel{16}}); err != nil {
		t.Fatal(err)
	}
	var stored string
	if err := db.QueryRowContext(ctx, `SELECT channels FROM biz WHERE name = 'plain'`).Scan(&stored); err != nil || stored != "2,16" {
		t.Fatalf("biz.channels of plain = %q, %v; want \"2,16\"", stored, err)
	}
	if b, err := s.GetBiz(ctx, "plain"); err != nil || !slices.Equal(b.Channels, []segment.Channel{S, 16}) {
		t.Errorf("GetBiz(plain) after the update: %v, %v", b.Channels, err)
	}
	if _, err := db.ExecContext(ctx, `UPDATE biz SET channels = '0,x' WHERE name = 'plain'`); err != nil {
		t.Fatal(err)
	}
	if _, err := s.GetBiz(ctx, "plain"); err == nil || !containsAll(err.Error(), "column channels") {
		t.Errorf("GetBiz of a hand-edited list: %v, want an error naming column channels", err)
	}
	// Running it again changes nothing.
	if applied, err := MigrateDB(ctx, db); err != nil || len(applied) != 0 {
		t.Fatalf("second Migrate applied %v, %v", applied, err)
	}
}
