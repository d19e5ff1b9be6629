package mysqlstore

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/idgen/idgen/internal/testdb"
	"github.com/idgen/idgen/segment"
	segmentmysql "github.com/idgen/idgen/segment/mysqlstore"
)

// newTestDatabase returns the DSN of a migrated database of the test's
// own on the test server, dropped when the test ends, or skips the test.
func newTestDatabase(t testing.TB) string {
	t.Helper()
	base := os.Getenv("IDGEN_TEST_MYSQL")
	if base == "" {
		t.Skip("IDGEN_TEST_MYSQL not set: run ./build.sh test")
	}
	return testdb.New(t, base)
}

// open opens a segment store on dsn (closed at cleanup; edit adjusts its
// configuration) and the owners' store on its connection.
func open(t testing.TB, dsn string, edit func(*segmentmysql.Config)) (*segmentmysql.Store, *Store) {
	t.Helper()
	cfg := segmentmysql.Config{DSN: dsn, CleanupInterval: -1}
	if edit != nil {
		edit(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	seg, err := segmentmysql.Open(ctx, cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { seg.Close() })
	return seg, New(seg)
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustCreate(t testing.TB, seg *segmentmysql.Store, b segment.Biz) segment.Biz {
	t.Helper()
	got, err := seg.CreateBiz(testCtx(t), b)
	if err != nil {
		t.Fatalf("CreateBiz(%+v): %v", b, err)
	}
	return got
}
