package main

import (
	"bytes"
	"database/sql"
	"os"
	"strings"
	"testing"

	"github.com/idgen/idgen/internal/testdb"
	"github.com/idgen/idgen/segment/mysqlstore"
)

func TestPrintReplication(t *testing.T) {
	safe := mysqlstore.Replication{Verdict: mysqlstore.VerdictSemisyncLossless, Detail: "binary log ON"}
	lossy := mysqlstore.Replication{Verdict: mysqlstore.VerdictAsync, Detail: "1 replica attached", Fix: "configure semi-sync"}
	unknown := mysqlstore.Replication{Verdict: mysqlstore.VerdictUnknown, Detail: "could not read x", Fix: "GRANT PROCESS"}
	for _, c := range []struct {
		r      mysqlstore.Replication
		strict bool
		line   string // prefix of the printed line
		fail   bool
	}{
		{safe, false, "replication: semisync-lossless (binary log ON): safe", false},
		{safe, true, "replication: semisync-lossless (", false},
		{lossy, false, "replication: WARNING: async (1 replica attached): LOSSY", false},
		{lossy, true, "replication: WARNING: async (", true},
		{unknown, false, "replication: WARNING: unknown (could not read x): cannot tell", false},
		{unknown, true, "replication: WARNING: unknown (", true},
	} {
		var out bytes.Buffer
		err := printReplication(&out, c.r, c.strict)
		if !strings.HasPrefix(out.String(), c.line) || strings.Count(out.String(), "\n") != 1 {
			t.Errorf("%s strict=%v: printed %q, want a line starting %q", c.r.Verdict, c.strict, out.String(), c.line)
		}
		if (err != nil) != c.fail {
			t.Errorf("%s strict=%v: error %v, want failure %v", c.r.Verdict, c.strict, err, c.fail)
		}
		if err != nil && !strings.Contains(err.Error(), "--strict-replication") {
			t.Errorf("error %q does not name the flag", err)
		}
	}
	if r := lossy.String(); !strings.Contains(r, "Fix: configure semi-sync") {
		t.Errorf("lossy verdict without its fix: %q", r)
	}
}

// idctl db check against the test server (standalone MariaDB): crash-safe
// durability and the no-replica verdict, exit 0 with and without
// --strict-replication; the flag belongs to check only.
func TestDBCheckPrintsReplication(t *testing.T) {
	cleanEnv(t)
	dsn := testDB(t)
	for _, args := range [][]string{{"db", "check", "--mysql", dsn}, {"db", "check", "--strict-replication", "--mysql", dsn}} {
		code, out, errOut := runCLI(t, args...)
		if code != 0 {
			t.Fatalf("%v: exit %d\nstdout:\n%s\nstderr:\n%s", args[:3], code, out, errOut)
		}
		lines := strings.Split(out, "\n")
		if len(lines) < 3 || !strings.HasPrefix(lines[0], "durability: ") || !strings.HasPrefix(lines[1], "replication: no-replica (") ||
			!strings.Contains(lines[2], "ORDERED rows checked") {
			t.Fatalf("%v: stdout:\n%s", args[:3], out)
		}
	}
	code, _, errOut := runCLI(t, "db", "migrate", "--strict-replication", "--mysql", dsn)
	if code != 2 || !strings.Contains(errOut, "not defined: -strict-replication") {
		t.Errorf("db migrate --strict-replication: exit %d, stderr %q", code, errOut)
	}
}

// idctl db unbind: on a database no cluster has bound it says so; on a
// bound one it names the cluster it forgot (issue 29, hole k).
func TestDBUnbind(t *testing.T) {
	cleanEnv(t)
	dsn := testDB(t)
	if code, out, errOut := runCLI(t, "db", "unbind", "--mysql", dsn); code != 0 || !strings.Contains(out, "belongs to no cluster") {
		t.Fatalf("unbind of an unbound database: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO cluster_binding (id, cluster, created_ms, bound_by, bound_at) VALUES (1, 'gone', 1000, 'x:1', NOW())`); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runCLI(t, "db", "unbind", "--mysql", dsn); code != 0 || !strings.Contains(out, `unbound cluster "gone"`) {
		t.Fatalf("unbind: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	var n int
	if err := db.QueryRow(`SELECT COUNT(*) FROM cluster_binding`).Scan(&n); err != nil || n != 0 {
		t.Fatalf("bindings left: %d, %v", n, err)
	}
}

// testDB returns a migrated database of the test's own on the test
// server (IDGEN_TEST_MYSQL), dropped when the test ends; it skips the test
// without one.
func testDB(t *testing.T) string {
	t.Helper()
	base := os.Getenv("IDGEN_TEST_MYSQL")
	if base == "" {
		t.Skip("IDGEN_TEST_MYSQL not set: run ./build.sh test (it starts ZooKeeper and MariaDB), or source .testenv")
	}
	return testdb.New(t, base)
}

// TestDBMySQLFileFlag: db takes the DSN as --mysql-file, as the nodes do
// (issue 32: only IDGEN_MYSQL_FILE had it), and IDGEN_MYSQL_FILE still.
func TestDBMySQLFileFlag(t *testing.T) {
	cleanEnv(t)
	dsn := testDB(t)
	file := writeToken(t, t.TempDir(), "mysql.dsn", dsn)
	if code, out, errOut := runCLI(t, "db", "version", "--mysql-file", file); code != 0 || !strings.Contains(out, "schema version") {
		t.Errorf("db version --mysql-file: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	t.Setenv("IDGEN_MYSQL_FILE", file)
	if code, out, errOut := runCLI(t, "db", "version"); code != 0 || !strings.Contains(out, "schema version") {
		t.Errorf("db version with IDGEN_MYSQL_FILE: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}
