package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/cluster/incarnation"
	"github.com/idgen/idgen/worker"
	"github.com/idgen/idgen/worker/mysqllease"
)

// The tests of `idctl cluster` run realMain against the ZooKeeper (and,
// for migrate, the MariaDB) that ./build.sh test starts, each on a cluster
// name of its own under the default root.

// clusterZK returns IDGEN_TEST_ZK, or skips.
func clusterZK(t *testing.T) string {
	t.Helper()
	addr := os.Getenv("IDGEN_TEST_ZK")
	if addr == "" {
		t.Skip("IDGEN_TEST_ZK not set: run ./build.sh test (it starts ZooKeeper and MariaDB), or source .testenv")
	}
	cleanEnv(t)
	for _, k := range []string{"IDGEN_CLUSTER", "IDGEN_ZK_ROOT", "IDGEN_ZK_AUTH"} {
		t.Setenv(k, "")
	}
	return addr
}

// newClusterName returns a fresh cluster name and removes its subtree from
// ZooKeeper when the test ends.
func newClusterName(t *testing.T, conn *zk.Conn) string {
	t.Helper()
	name := fmt.Sprintf("idctl%d", rand.Uint32())
	t.Cleanup(func() { deleteTree(conn, cluster.Path(worker.DefaultRoot, name)) })
	return name
}

// dialTestZK opens a ZooKeeper client for checks, closed at the end.
func dialTestZK(t *testing.T, addr string) *zk.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	conn, err := worker.DialZK(ctx, strings.Split(addr, ","), worker.DefaultSessionTimeout, "", nil)
	if err != nil {
		t.Fatalf("dial ZooKeeper %s: %v", addr, err)
	}
	t.Cleanup(conn.Close)
	return conn
}

func deleteTree(conn *zk.Conn, p string) {
	kids, _, err := conn.Children(p)
	if err != nil {
		return
	}
	for _, k := range kids {
		deleteTree(conn, p+"/"+k)
	}
	_ = conn.Delete(p, -1)
}

// mustRun runs idctl and fails unless it exits want; it returns stdout and
// stderr.
func mustRun(t *testing.T, want int, args ...string) (stdout, stderr string) {
	t.Helper()
	code, out, errOut := runCLI(t, args...)
	if code != want {
		t.Fatalf("idctl %s: exit %d, want %d\nstdout:\n%s\nstderr:\n%s", strings.Join(args, " "), code, want, out, errOut)
	}
	return out, errOut
}

// showJSON returns the record `idctl cluster show --json` prints.
func showJSON(t *testing.T, zkAddr, name string) cluster.Record {
	t.Helper()
	out, _ := mustRun(t, 0, "cluster", "show", "--zk", zkAddr, "--cluster", name, "--json")
	var r cluster.Record
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("cluster show --json printed %q: %v", out, err)
	}
	return r
}

func wantIn(t *testing.T, what, s string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(s, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, s)
		}
	}
}

const (
	testEpoch   = "2024-03-01T00:00:00Z"
	testEpochMs = 1709251200000
)

func TestClusterInitShow(t *testing.T) {
	zkAddr := clusterZK(t)
	conn := dialTestZK(t, zkAddr)
	name := newClusterName(t, conn)
	base := []string{"--zk", zkAddr, "--cluster", name}
	initArgs := append([]string{"cluster", "init"}, append(base, "--idc-bits", "4", "--node-bits", "6", "--epoch", testEpoch)...)

	// show before init: no record.
	code, _, errOut := runCLI(t, append([]string{"cluster", "show"}, base...)...)
	if code != 1 || !strings.Contains(errOut, "cluster does not exist") {
		t.Errorf("show before init: exit %d, stderr %q; want 1 naming that the cluster does not exist", code, errOut)
	}

	before := time.Now().Add(-time.Minute).UnixMilli()
	out, _ := mustRun(t, 0, initArgs...)
	wantIn(t, "init's stdout", out, "cluster "+name+" created", "idc_bits 4, node_bits 6", "2024-03-01T00:00:00")

	r := showJSON(t, zkAddr, name)
	if !r.Init || r.Registry != cluster.RegistryZooKeeper || r.IDCBits != 4 || r.NodeBits != 6 || r.EpochMs != testEpochMs {
		t.Errorf("record after init: %+v; want init, registry zookeeper, idc_bits 4, node_bits 6, epoch_ms %d", r, testEpochMs)
	}
	if r.CreatedMs < before || r.CreatedMs > time.Now().Add(time.Minute).UnixMilli() || r.Created == "" {
		t.Errorf("created_ms %d (%q): want about now", r.CreatedMs, r.Created)
	}
	if r.Restores != 0 || r.RestoredMs != 0 || r.Restored != "" {
		t.Errorf("a new cluster is marked restored: %+v", r)
	}
	// The incarnation marker (package cluster/incarnation).
	m, _, err := incarnation.ReadMarker(conn, worker.DefaultRoot, name)
	if err != nil || m.ID == "" {
		t.Fatalf("incarnation marker after init: %+v, %v", m, err)
	}
	// The text form too.
	out, _ = mustRun(t, 0, append([]string{"cluster", "show"}, base...)...)
	wantIn(t, "show's text", out, "registry  zookeeper", "init      true", "bits      idc 4, node 6", "incarnation "+m.ID)

	t.Run("second init fails", func(t *testing.T) {
		code, out, errOut := runCLI(t, initArgs...)
		if code != 1 || out != "" {
			t.Fatalf("exit %d, stdout %q; want 1 and nothing on stdout", code, out)
		}
		wantIn(t, "stderr", errOut, "cluster exists already", cluster.MetaPath(worker.DefaultRoot, name))
		checkOnePrefix(t, errOut)
	})
	t.Run("exists-ok, same settings", func(t *testing.T) {
		out, _ := mustRun(t, 0, append(initArgs, "--exists-ok")...)
		wantIn(t, "stdout", out, "cluster "+name+" exists", "incarnation "+m.ID)
	})
	t.Run("exists-ok, other settings", func(t *testing.T) {
		for _, other := range [][]string{
			{"--idc-bits", "2", "--node-bits", "8", "--epoch", testEpoch},
			{"--idc-bits", "4", "--node-bits", "6", "--epoch", "2020-01-01T00:00:00Z"},
		} {
			args := append(append([]string{"cluster", "init"}, base...), append(other, "--exists-ok")...)
			code, _, errOut := runCLI(t, args...)
			if code != 1 {
				t.Fatalf("%v: exit %d, want 1; stderr %q", other, code, errOut)
			}
			wantIn(t, "stderr", errOut, "exists with other settings", "idc_bits 4", "node_bits 6", "2024-03-01T00:00:00")
		}
		if got := showJSON(t, zkAddr, name); got.CreatedMs != r.CreatedMs || got.IDCBits != 4 || got.EpochMs != testEpochMs {
			t.Errorf("record changed by refused inits: %+v, was %+v", got, r)
		}
	})
}

// writeProperties writes a node's properties file the way worker does
// (worker/properties.go) and returns its path.
func writeProperties(t *testing.T, name string, createdMs int64) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "idgen:8888:127.0.0.1.properties")
	hw := time.Now().UnixMilli()
	body := fmt.Sprintf(`# idgen worker slot cache, rewritten on every heartbeat; do not edit while idgen runs.
# highWater %s
cluster=%s
idc=1
node=3
workerId=%d
highWater=%d
exact=true
epochMs=%d
idcBits=4
nodeBits=6
createdMs=%d
`, time.UnixMilli(hw).UTC().Format(time.RFC3339), name, 1<<6+3, hw, int64(testEpochMs), createdMs)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestClusterRestore(t *testing.T) {
	zkAddr := clusterZK(t)
	conn := dialTestZK(t, zkAddr)

	t.Run("existing record", func(t *testing.T) {
		name := newClusterName(t, conn)
		mustRun(t, 0, "cluster", "init", "--zk", zkAddr, "--cluster", name, "--idc-bits", "4", "--node-bits", "6", "--epoch", testEpoch)
		was := showJSON(t, zkAddr, name)
		out, _ := mustRun(t, 0, "cluster", "restore", "--zk", zkAddr, "--cluster", name)
		wantIn(t, "stdout", out, "marked restored")
		r := showJSON(t, zkAddr, name)
		if r.Restores != 1 || r.RestoredMs == 0 || r.Restored == "" || !strings.Contains(r.RestoreReason, "idctl cluster restore") {
			t.Errorf("after restore: %+v; want restores 1, restored time and reason set", r)
		}
		if r.RestoredMs < was.CreatedMs || r.CreatedMs != was.CreatedMs || r.EpochMs != was.EpochMs || r.IDCBits != 4 {
			t.Errorf("after restore: %+v; before: %+v", r, was)
		}
		if b := r.Bound(time.Second); b != max(r.RestoredMs, r.ZKEpochSeenMs)+1000 {
			t.Errorf("bound %d after a restore at %d", b, r.RestoredMs)
		}
		out, _ = mustRun(t, 0, "cluster", "show", "--zk", zkAddr, "--cluster", name)
		wantIn(t, "show's text", out, "restored  1 time(s)")
		// A second restore counts again and never moves the time back.
		mustRun(t, 0, "cluster", "restore", "--zk", zkAddr, "--cluster", name)
		if r2 := showJSON(t, zkAddr, name); r2.Restores != 2 || r2.RestoredMs < r.RestoredMs {
			t.Errorf("after a second restore: %+v", r2)
		}
	})

	t.Run("no record, no properties", func(t *testing.T) {
		name := newClusterName(t, conn)
		code, out, errOut := runCLI(t, "cluster", "restore", "--zk", zkAddr, "--cluster", name)
		if code != 1 || out != "" {
			t.Fatalf("exit %d, stdout %q; want 1", code, out)
		}
		wantIn(t, "stderr", errOut, "no record", "--from-properties")
		checkOnePrefix(t, errOut)
		if _, _, err := cluster.Read(conn, worker.DefaultRoot, name); !errors.Is(err, cluster.ErrNotFound) {
			t.Errorf("a refused restore left a record: %v", err)
		}
	})

	t.Run("no record, from properties", func(t *testing.T) {
		name := newClusterName(t, conn)
		created := time.Now().Add(-72 * time.Hour).UnixMilli()
		props := writeProperties(t, name, created)

		// A file of another cluster is refused.
		other := writeProperties(t, name+"x", created)
		code, _, errOut := runCLI(t, "cluster", "restore", "--zk", zkAddr, "--cluster", name, "--from-properties", other)
		if code != 1 || !strings.Contains(errOut, "belongs to cluster") {
			t.Errorf("another cluster's file: exit %d, stderr %q", code, errOut)
		}

		out, _ := mustRun(t, 0, "cluster", "restore", "--zk", zkAddr, "--cluster", name, "--from-properties", props)
		wantIn(t, "stdout", out, "re-created from "+props, "marked restored")
		r := showJSON(t, zkAddr, name)
		if r.CreatedMs != created || r.EpochMs != testEpochMs || r.IDCBits != 4 || r.NodeBits != 6 {
			t.Errorf("re-created record %+v; want created_ms %d, epoch_ms %d, bits 4/6", r, created, int64(testEpochMs))
		}
		if !r.Init || r.Registry != cluster.RegistryZooKeeper || r.Restores != 1 || r.RestoredMs < time.Now().Add(-time.Minute).UnixMilli() {
			t.Errorf("re-created record %+v; want init, registry zookeeper, restores 1, restored now", r)
		}
		if _, _, err := incarnation.ReadMarker(conn, worker.DefaultRoot, name); !errors.Is(err, zk.ErrNoNode) {
			t.Errorf("a properties file without an incarnation re-created a marker: %v", err)
		}
		// The record exists now: init refuses, init --exists-ok with the
		// file's settings agrees.
		mustRun(t, 1, "cluster", "init", "--zk", zkAddr, "--cluster", name, "--idc-bits", "4", "--node-bits", "6", "--epoch", testEpoch)
		mustRun(t, 0, "cluster", "init", "--zk", zkAddr, "--cluster", name, "--idc-bits", "4", "--node-bits", "6", "--epoch", testEpoch, "--exists-ok")
	})

	t.Run("no record, from properties with an incarnation", func(t *testing.T) {
		name := newClusterName(t, conn)
		props := writeProperties(t, name, time.Now().Add(-72*time.Hour).UnixMilli())
		f, err := os.OpenFile(props, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(f, "incarnation.id=feedc0de\nincarnation.node=idgen:8888:127.0.0.1-01020304\nincarnation.lineage=3:tok\nincarnation.counter=12\nincarnation.restores=0\n")
		f.Close()
		out, _ := mustRun(t, 0, "cluster", "restore", "--zk", zkAddr, "--cluster", name, "--from-properties", props)
		wantIn(t, "stdout", out, "re-created from "+props, "incarnation feedc0de")
		m, _, err := incarnation.ReadMarker(conn, worker.DefaultRoot, name)
		if err != nil || m.ID != "feedc0de" || m.Counter != 12 {
			t.Fatalf("marker after restore: %+v, %v; want the file's incarnation feedc0de at counter 12", m, err)
		}
	})
}

func TestClusterUsageErrors(t *testing.T) {
	cleanEnv(t)
	for _, k := range []string{"IDGEN_CLUSTER", "IDGEN_ZK_ROOT", "IDGEN_ZK_AUTH"} {
		t.Setenv(k, "")
	}
	// The cases with --zk ZK dial ZooKeeper before they check the other
	// flags; they run only with IDGEN_TEST_ZK.
	zkAddr := os.Getenv("IDGEN_TEST_ZK")
	cases := []struct {
		args   []string
		want   []string
		needZK bool
	}{
		{[]string{"cluster"}, []string{"missing subcommand", "idctl cluster init"}, false},
		{[]string{"cluster", "frob", "--zk", "h:1"}, []string{`unknown subcommand "frob"`, "idctl cluster migrate"}, false},
		{[]string{"cluster", "init"}, []string{"--zk is required"}, false},
		{[]string{"cluster", "show", "--cluster", "x"}, []string{"--zk is required"}, false},
		{[]string{"cluster", "restore"}, []string{"--zk is required"}, false},
		{[]string{"cluster", "migrate", "--to", "zookeeper"}, []string{"--zk is required"}, false},
		{[]string{"cluster", "show", "--zk", "h:1", "--to", "mysql"}, []string{"flag provided but not defined: -to"}, false},
		{[]string{"cluster", "show", "--zk", "h:1", "extra"}, []string{`unexpected argument "extra"`}, false},
		{[]string{"cluster", "init", "--zk", zkAddr, "--cluster", "never-created", "--epoch", "yesterday"}, []string{`--epoch "yesterday"`}, true},
		{[]string{"cluster", "migrate", "--zk", zkAddr, "--to", "zookeeper"}, []string{"--mysql-file F or --mysql (env IDGEN_MYSQL_FILE or IDGEN_MYSQL) is required"}, true},
		{[]string{"cluster", "migrate", "--zk", zkAddr, "--mysql", "root@tcp(127.0.0.1:1)/x", "--to", "bogus"}, []string{`--to "bogus": want zookeeper or mysql`}, true},
		{[]string{"cluster", "migrate", "--zk", zkAddr, "--mysql", "root@tcp(127.0.0.1:1)/x"}, []string{`--to "": want zookeeper or mysql`}, true},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			if c.needZK && zkAddr == "" {
				t.Skip("IDGEN_TEST_ZK not set: run ./build.sh test (it starts ZooKeeper and MariaDB), or source .testenv")
			}
			code, out, errOut := runCLI(t, c.args...)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, errOut)
			}
			if out != "" {
				t.Errorf("stdout not empty on a usage error:\n%s", out)
			}
			wantIn(t, "stderr", errOut, c.want...)
			checkOnePrefix(t, errOut)
		})
	}
	if zkAddr == "" {
		return
	}
	conn := dialTestZK(t, zkAddr)
	if ok, _, err := conn.Exists(cluster.Path(worker.DefaultRoot, "never-created")); err != nil || ok {
		t.Errorf("a usage error created the cluster's znode: exists %v, %v", ok, err)
	}
}

// testHolder is a worker.Holder whose last used millisecond is set by the
// test (the exact mark a clean close writes).
type testHolder struct {
	mu       sync.Mutex
	acquired worker.Slot
	lastUsed int64
}

func (h *testHolder) Acquired(s worker.Slot) { h.mu.Lock(); h.acquired = s; h.mu.Unlock() }
func (h *testHolder) Extended(int64)         {}
func (h *testHolder) Fenced(error)           {}
func (h *testHolder) LastUsed() int64        { h.mu.Lock(); defer h.mu.Unlock(); return h.lastUsed }
func (h *testHolder) slot() worker.Slot      { h.mu.Lock(); defer h.mu.Unlock(); return h.acquired }

// zkMarks reads every last/<node> mark of the cluster in ZooKeeper.
func zkMarks(t *testing.T, conn *zk.Conn, name string) map[[2]int]int64 {
	t.Helper()
	out := map[[2]int]int64{}
	p := cluster.Path(worker.DefaultRoot, name)
	kids, _, err := conn.Children(p)
	if errors.Is(err, zk.ErrNoNode) {
		return out
	}
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range kids {
		s, ok := strings.CutPrefix(k, "idc-")
		if !ok {
			continue
		}
		idc, err := strconv.Atoi(s)
		if err != nil {
			t.Fatalf("znode %s/%s", p, k)
		}
		nodes, _, err := conn.Children(p + "/" + k + "/last")
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range nodes {
			node, err := strconv.Atoi(n)
			if err != nil {
				t.Fatalf("znode %s/%s/last/%s", p, k, n)
			}
			b, _, err := conn.Get(p + "/" + k + "/last/" + n)
			if err != nil {
				t.Fatal(err)
			}
			var d struct {
				HighWater int64 `json:"high_water"`
			}
			if err := json.Unmarshal(b, &d); err != nil {
				t.Fatalf("%s/%s/last/%s: %q: %v", p, k, n, b, err)
			}
			out[[2]int{idc, node}] = d.HighWater
		}
	}
	return out
}

func TestClusterMigrate(t *testing.T) {
	zkAddr := clusterZK(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dsn := testDB(t)
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	conn := dialTestZK(t, zkAddr)
	name := newClusterName(t, conn)
	common := []string{"--zk", zkAddr, "--mysql", dsn, "--cluster", name}
	migrate := func(to string) []string { return append([]string{"cluster", "migrate", "--to", to}, common...) }
	meta := worker.Meta{EpochMs: testEpochMs, IDCBits: 4, NodeBits: 6}
	registry := func() string {
		t.Helper()
		r, ok, err := mysqllease.ClusterRegistry(ctx, db, name)
		if err != nil || !ok {
			t.Fatalf("ClusterRegistry: %q, %v, %v", r, ok, err)
		}
		return r
	}
	mysqlMarks := func() map[[2]int]int64 {
		t.Helper()
		m, live, err := mysqllease.Marks(ctx, db, name)
		if err != nil {
			t.Fatal(err)
		}
		if live {
			t.Fatal("a MySQL lease is live")
		}
		return m
	}
	register := func(idc, port int) (*mysqllease.Lease, *testHolder) {
		t.Helper()
		h := &testHolder{}
		l, err := mysqllease.Register(ctx, mysqllease.Config{DB: db, Cluster: name, IDC: idc, Host: "127.0.0.1", Port: port,
			Meta: meta, Holder: h, HeartbeatInterval: 500 * time.Millisecond, OutageTolerance: 2 * time.Second})
		if err != nil {
			t.Fatalf("mysqllease.Register idc %d: %v", idc, err)
		}
		t.Cleanup(func() { _ = l.Close(context.Background()) })
		return l, h
	}

	// Two MySQL-held slots, one live.
	a, ha := register(1, 7001)
	b, hb := register(3, 7002)

	// While a lease is live the migration is refused and changes nothing.
	code, out, errOut := runCLI(t, migrate("zookeeper")...)
	if code != 1 || out != "" {
		t.Fatalf("migrate with live leases: exit %d, stdout %q, stderr %q; want 1", code, out, errOut)
	}
	wantIn(t, "refusal", errOut, "live lease", "stop every node")
	if r := registry(); r != mysqllease.RegistryMySQL {
		t.Errorf("registry %q after a refused migration, want mysql", r)
	}
	if ok, _, err := conn.Exists(cluster.Path(worker.DefaultRoot, name)); err != nil || ok {
		t.Errorf("a refused migration wrote to ZooKeeper: cluster znode exists %v, %v", ok, err)
	}
	if a.State() != worker.StateRegistered {
		t.Errorf("the live lease is %s after a refused migration", a.State())
	}

	// Clean shutdown: exact marks, a little in the past.
	now := time.Now().UnixMilli()
	ha.mu.Lock()
	ha.lastUsed = now - 1500
	ha.mu.Unlock()
	hb.mu.Lock()
	hb.lastUsed = now - 2500
	hb.mu.Unlock()
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(ctx); err != nil {
		t.Fatal(err)
	}
	sa, sb := ha.slot(), hb.slot()
	my := mysqlMarks()
	if len(my) != 2 || my[[2]int{1, sa.Node}] < now-1500 || my[[2]int{3, sb.Node}] < now-2500 {
		t.Fatalf("MySQL marks after clean closes: %v (slots %+v, %+v)", my, sa, sb)
	}
	var createdMs int64
	if err := db.QueryRowContext(ctx, `SELECT created_ms FROM worker_cluster WHERE cluster = ?`, name).Scan(&createdMs); err != nil {
		t.Fatal(err)
	}

	// To ZooKeeper.
	out, _ = mustRun(t, 0, migrate("zookeeper")...)
	wantIn(t, "stdout", out, "held in zookeeper now", "with --zk and --mysql")
	if r := registry(); r != mysqllease.RegistryZooKeeper {
		t.Errorf("registry %q after migrating to ZooKeeper", r)
	}
	rec := showJSON(t, zkAddr, name)
	if rec.CreatedMs != createdMs || rec.EpochMs != testEpochMs || rec.IDCBits != 4 || rec.NodeBits != 6 ||
		rec.Registry != cluster.RegistryZooKeeper || !rec.Init || rec.Restores != 0 {
		t.Errorf("ZooKeeper record after the migration: %+v; want MySQL's created_ms %d and settings, init, not restored", rec, createdMs)
	}
	zm := zkMarks(t, conn, name)
	for k, v := range my {
		if zm[k] < v {
			t.Errorf("ZooKeeper mark of idc %d node %d is %d, below MySQL's %d (all: %v)", k[0], k[1], zm[k], v, zm)
		}
	}
	// A MySQL node is refused now.
	if _, err := mysqllease.Register(ctx, mysqllease.Config{DB: db, Cluster: name, IDC: 1, Meta: meta, Holder: &testHolder{}}); !errors.Is(err, mysqllease.ErrRegistryMismatch) {
		t.Errorf("a MySQL lease after the migration to ZooKeeper: %v, want ErrRegistryMismatch", err)
	}
	// Again: nothing to do.
	mustRun(t, 0, migrate("zookeeper")...)

	// Nodes ran on ZooKeeper meanwhile: a mark moved and another slot was
	// used. Back to MySQL, every mark comes along.
	moved := map[[2]int]int64{{1, sa.Node}: now - 500, {2, 5}: now - 700}
	if err := (worker.ZKRegistry{Conn: conn, Root: worker.DefaultRoot, Cluster: name}).RaiseMarks(ctx, moved); err != nil {
		t.Fatal(err)
	}
	zm = zkMarks(t, conn, name)
	out, _ = mustRun(t, 0, migrate("mysql")...)
	wantIn(t, "stdout", out, "held in mysql now", "with --mysql and without --zk")
	if r := registry(); r != mysqllease.RegistryMySQL {
		t.Errorf("registry %q after migrating back to MySQL", r)
	}
	back := mysqlMarks()
	for k, v := range zm {
		if back[k] < v {
			t.Errorf("MySQL mark of idc %d node %d is %d, below ZooKeeper's %d (all: %v)", k[0], k[1], back[k], v, back)
		}
	}
	var createdBack int64
	if err := db.QueryRowContext(ctx, `SELECT created_ms FROM worker_cluster WHERE cluster = ?`, name).Scan(&createdBack); err != nil || createdBack != createdMs {
		t.Errorf("created_ms %d after the round trip, want %d (%v)", createdBack, createdMs, err)
	}
	// A MySQL node starts again, past its slot's mark.
	c, hc := register(1, 7001)
	if s := hc.slot(); s.NotBefore < back[[2]int{1, s.Node}] {
		t.Errorf("slot %+v taken below its imported mark %d", s, back[[2]int{1, s.Node}])
	}

	// Live again: refused in this direction too, nothing changed.
	zmBefore := zkMarks(t, conn, name)
	code, _, errOut = runCLI(t, migrate("zookeeper")...)
	if code != 1 || !strings.Contains(errOut, "live lease") {
		t.Errorf("migrate with a live lease: exit %d, stderr %q", code, errOut)
	}
	if r := registry(); r != mysqllease.RegistryMySQL {
		t.Errorf("registry %q after a refused migration", r)
	}
	if zmAfter := zkMarks(t, conn, name); fmt.Sprint(zmAfter) != fmt.Sprint(zmBefore) {
		t.Errorf("ZooKeeper marks changed by a refused migration: %v, were %v", zmAfter, zmBefore)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
}
