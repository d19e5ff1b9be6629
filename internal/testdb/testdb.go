// Package testdb gives end-to-end tests a migrated MariaDB database of
// their own on the server ./build.sh test starts (IDGEN_TEST_MYSQL). It is
// apart from internal/testnode because it imports the MySQL store, whose
// own tests use testnode.
package testdb

import (
	"context"
	"database/sql"
	"fmt"
	"math/rand/v2"
	"testing"

	_ "github.com/go-sql-driver/mysql" // the driver the DSNs are for

	"github.com/idgen/idgen/segment/mysqlstore"
)

// New creates a database on the server of base (a DSN without a
// database), migrates it to the schema this build needs, drops it when the
// test ends and returns its DSN.
func New(t testing.TB, base string) string {
	t.Helper()
	name := fmt.Sprintf("idgen_test_%d", rand.Uint32())
	admin, err := sql.Open("mysql", base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_, _ = admin.Exec("DROP DATABASE IF EXISTS " + name)
		admin.Close()
	})
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	dsn := base + name
	if _, err := mysqlstore.Migrate(context.Background(), dsn); err != nil {
		t.Fatal(err)
	}
	return dsn
}
