package localcluster

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql" // the driver of IDGEN_TEST_MYSQL's DSN
)

// TestIntegration_ClusterUpDown runs `./build.sh cluster up 2` on the test
// servers (IDGEN_TEST_ZK, IDGEN_TEST_MYSQL: the script then makes a
// database and a cluster name of its own and leaves the servers running),
// sources the env file it prints, asks for an ID on every channel with
// plain `idctl get`, reads every node's /status with the admin token and
// `idctl workers` (two IDCs), then `./build.sh cluster down` twice: every
// node it started is gone, its database dropped, its directory removed,
// and the second down is a no-op that succeeds.
func TestIntegration_ClusterUpDown(t *testing.T) {
	if os.Getenv("IDGEN_TEST_ZK") == "" || os.Getenv("IDGEN_TEST_MYSQL") == "" {
		t.Skip("IDGEN_TEST_ZK / IDGEN_TEST_MYSQL not set: run ./build.sh test (it starts ZooKeeper and MariaDB), or source .testenv")
	}
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	buildSh, err := filepath.Abs("../../build.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "cluster")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	run := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, bash, args...)
		cmd.Env = append(os.Environ(), "IDGEN_CLUSTER_DIR="+dir)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	var pids []int
	var db string
	downed := false
	down := func() {
		if downed {
			return
		}
		downed = true
		if out, err := run(buildSh, "cluster", "down"); err != nil {
			t.Errorf("cluster down: %v\n%s", err, out)
		}
	}
	t.Cleanup(down) // whatever fails below, nothing is left running

	out, err := run(buildSh, "cluster", "up", "2")
	pids, db = readState(t, dir) // before any check: the cleanup must know them
	if err != nil {
		t.Fatalf("cluster up 2: %v\n%s", err, out)
	}
	if len(pids) != 2 {
		t.Fatalf("cluster up 2 started %d nodes (pid files), want 2\n%s", len(pids), out)
	}
	for _, want := range []string{"export IDGEN_ADDR=", "export IDGEN_ZK=", "IDGEN_ZK_AUTH_FILE=", "export IDGEN_MYSQL_FILE=",
		"/status", "idgen.log", "./build.sh cluster down"} {
		if !strings.Contains(out, want) {
			t.Errorf("cluster up's output lacks %q:\n%s", want, out)
		}
	}
	for _, f := range []string{"admin.token", "client.token", "zk.auth", "mysql.dsn"} {
		st, err := os.Stat(filepath.Join(dir, "secrets", f))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("secrets/%s: mode %v, want 0600", f, st.Mode().Perm())
		}
	}

	// idctl with nothing but the printed exports.
	idctl := func(args ...string) (string, error) {
		return run(append([]string{"-c", `. "$IDGEN_CLUSTER_DIR/env" && exec "$IDGEN_CLUSTER_DIR/bin/idctl" "$@"`, "idctl"}, args...)...)
	}
	for _, ch := range []string{"snowflake", "unordered", "ordered", "slow_ordered"} {
		args := []string{"get", "--biz", "demo", "--channel", ch}
		if ch == "ordered" || ch == "slow_ordered" {
			args = append(args, "--sub-key", "k1")
		}
		out, err := idctl(args...)
		if err != nil {
			t.Errorf("idctl %s: %v\n%s", strings.Join(args, " "), err, out)
			continue
		}
		if id, err := strconv.ParseInt(strings.TrimSpace(out), 10, 64); err != nil || id <= 0 {
			t.Errorf("idctl %s printed %q, want one positive ID", strings.Join(args, " "), out)
		}
	}
	out, err = idctl("workers", "--json")
	if err != nil {
		t.Fatalf("idctl workers: %v\n%s", err, out)
	}
	var members []struct {
		IDC int `json:"idc"`
	}
	if err := json.Unmarshal([]byte(out), &members); err != nil {
		t.Fatalf("idctl workers --json: %v\n%s", err, out)
	}
	idcs := map[int]bool{}
	for _, m := range members {
		idcs[m.IDC] = true
	}
	if len(members) != 2 || !idcs[1] || !idcs[2] {
		t.Errorf("idctl workers: %s, want one member in IDC 1 and one in IDC 2", out)
	}
	token, err := os.ReadFile(filepath.Join(dir, "secrets", "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		admin, err := os.ReadFile(filepath.Join(dir, "node"+strconv.Itoa(i), "admin"))
		if err != nil {
			t.Fatal(err)
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+strings.TrimSpace(string(admin))+"/status", nil)
		req.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(token)))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("node %d /status: %v", i, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("node %d /status with the admin token: %s, want 200", i, resp.Status)
		}
	}

	down()
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("node pid %d still there after cluster down (kill -0: %v)", pid, err)
		}
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s still there after cluster down (%v)", dir, err)
	}
	if db != "" {
		conn, err := sql.Open("mysql", os.Getenv("IDGEN_TEST_MYSQL"))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		var n int
		if err := conn.QueryRowContext(ctx, "SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?", db).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("database %s still there after cluster down", db)
		}
	} else {
		t.Error("cluster up wrote no 'shared' file naming its database on the test server")
	}
	if out, err := run(buildSh, "cluster", "down"); err != nil || !strings.Contains(out, "nothing to stop") {
		t.Errorf("a second cluster down: %v, want success saying nothing to stop:\n%s", err, out)
	}
}

// readState: the pids of the nodes `up` started (node*/pid) and the
// database it made on the shared server (line 2 of "shared").
func readState(t *testing.T, dir string) (pids []int, db string) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "node*", "pid"))
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if pid, err := strconv.Atoi(strings.TrimSpace(string(raw))); err == nil {
			pids = append(pids, pid)
		}
	}
	if raw, err := os.ReadFile(filepath.Join(dir, "shared")); err == nil {
		if lines := strings.Split(strings.TrimSpace(string(raw)), "\n"); len(lines) == 2 {
			db = lines[1]
		}
	}
	return pids, db
}

// TestIntegration_ServersDatabase: the DSN `./build.sh servers start` (and
// test) exports for idctl and idgen, IDGEN_TEST_MYSQL_DSN, names a database
// that exists, so `idctl db migrate` works on it with nothing made by hand
// (it used to name none: "no database selected").
func TestIntegration_ServersDatabase(t *testing.T) {
	dsn := os.Getenv("IDGEN_TEST_MYSQL_DSN")
	if dsn == "" {
		t.Skip("IDGEN_TEST_MYSQL_DSN not set: servers from before it, or none (run ./build.sh test, or ./build.sh servers start and source .testenv)")
	}
	conn, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var name sql.NullString
	if err := conn.QueryRow("SELECT DATABASE()").Scan(&name); err != nil {
		t.Fatalf("IDGEN_TEST_MYSQL_DSN %s: %v", dsn, err)
	}
	if !name.Valid || name.String == "" {
		t.Errorf("IDGEN_TEST_MYSQL_DSN %s selects no database", dsn)
	}
}

// TestClusterDownRefusesForeignDir: `cluster down` removes only a
// directory `cluster up` made (its mark file): IDGEN_CLUSTER_DIR pointed at
// another directory fails and leaves it as it was.
func TestClusterDownRefusesForeignDir(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	buildSh, err := filepath.Abs("../../build.sh")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keep := filepath.Join(dir, "keep")
	if err := os.WriteFile(keep, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bash, buildSh, "cluster", "down")
	cmd.Env = append(os.Environ(), "IDGEN_CLUSTER_DIR="+dir)
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "is no cluster made by ./build.sh cluster up") {
		t.Errorf("cluster down on a foreign directory: %v, want a refusal naming it:\n%s", err, out)
	}
	if _, err := os.Stat(keep); err != nil {
		t.Errorf("cluster down touched a foreign directory: %v", err)
	}
}
