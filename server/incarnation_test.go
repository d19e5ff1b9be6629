package server

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/cluster/incarnation"
	"github.com/idgen/idgen/cluster/zksession"
	"github.com/idgen/idgen/internal/testdb"
	"github.com/idgen/idgen/segment/mysqlstore"
	"github.com/idgen/idgen/worker"
)

var errIncarnationRefused = errors.New("refused (test)")

// copyTree reads every znode under p (a copy of the subtree's state).
func copyTree(t *testing.T, c *zk.Conn, p string, into map[string][]byte) {
	t.Helper()
	b, _, err := c.Get(p)
	if err != nil {
		t.Fatalf("copy %s: %v", p, err)
	}
	into[p] = b
	kids, _, err := c.Children(p)
	if err != nil {
		t.Fatalf("copy %s: %v", p, err)
	}
	for _, k := range kids {
		copyTree(t, c, path.Join(p, k), into)
	}
}

// restoreTree rewrites the subtree at p to a copy: znodes created since
// are deleted, the others get their copied data back. This is what a
// ZooKeeper restored from a data dir copy serves (its versions and zxids
// differ, which the check does not rely on).
func restoreTree(t *testing.T, c *zk.Conn, p string, snap map[string][]byte) {
	t.Helper()
	kids, _, err := c.Children(p)
	if err != nil {
		t.Fatalf("restore %s: %v", p, err)
	}
	for _, k := range kids {
		restoreTree(t, c, path.Join(p, k), snap)
	}
	data, ok := snap[p]
	if !ok {
		if err := c.Delete(p, -1); err != nil {
			t.Fatalf("restore: delete %s: %v", p, err)
		}
		return
	}
	if _, err := c.Set(p, data, -1); err != nil {
		t.Fatalf("restore %s: %v", p, err)
	}
}

// incarnationZK connects to the test ZooKeeper as the server's tools do
// (worker.DialZK: a session before it returns, its events drained), or
// skips the test without the test servers. The context bounds the test.
func incarnationZK(t *testing.T) (context.Context, *zk.Conn) {
	t.Helper()
	zkAddr, base := os.Getenv("IDGEN_TEST_ZK"), os.Getenv("IDGEN_TEST_MYSQL")
	if zkAddr == "" || base == "" {
		t.Skip("IDGEN_TEST_ZK / IDGEN_TEST_MYSQL not set: run ./build.sh test (it starts ZooKeeper and MariaDB)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	conn, err := worker.DialZK(ctx, strings.Split(zkAddr, ","), 10*time.Second, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	return ctx, conn
}

// incarnationRoot is the ZooKeeper root of the incarnation tests' clusters.
const incarnationRoot = "/idgen-test-incarnation"

// incarnationCluster creates a cluster named prefix<nanos> under
// incarnationRoot as `idctl cluster init` does (the meta and the
// incarnation marker) and a fresh database bound to it, the witness.
func incarnationCluster(t *testing.T, ctx context.Context, conn *zk.Conn, prefix string) (string, *mysqlstore.Store) {
	t.Helper()
	name := fmt.Sprintf("%s%d", prefix, time.Now().UnixNano())
	acl := zk.WorldACL(zk.PermAll)
	rec, err := cluster.Init(conn, incarnationRoot, name, cluster.Settings{EpochMs: 1577836800000, IDCBits: 2, NodeBits: 8}, acl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := incarnation.Create(conn, incarnationRoot, name, acl, time.Now()); err != nil {
		t.Fatal(err)
	}
	store, err := mysqlstore.Open(ctx, mysqlstore.Config{DSN: testdb.New(t, os.Getenv("IDGEN_TEST_MYSQL")), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	if _, err := store.BindCluster(ctx, name, rec.CreatedMs, "test"); err != nil {
		t.Fatal(err)
	}
	return name, store
}

// incarnationNode is the configuration of a new node of cluster name:
// its own (empty) properties directory, and --mysql set so the check has
// the database as witness.
func incarnationNode(t *testing.T, name string) Config {
	return Config{ZKRoot: incarnationRoot, Cluster: name, PropertiesDir: t.TempDir(), AdvertiseHost: "127.0.0.1", MySQL: "set"}
}

// TestIntegration_IncarnationRestoreFromCopy runs the incarnation check
// as a server builds it (properties file record, the database as
// witness) against the real ZooKeeper and MariaDB: the cluster's subtree
// is copied, a node reconnects, the subtree is restored to the copy, and
// a new node checks first. The new node sees the restore through the
// database, the old node through its lineage, and a re-created cluster
// is refused (issue 29, hole h).
func TestIntegration_IncarnationRestoreFromCopy(t *testing.T) {
	ctx, conn := incarnationZK(t)
	name, store := incarnationCluster(t, ctx, conn, "c")
	acl := zk.WorldACL(zk.PermAll)
	cfgA := incarnationNode(t, name)
	check := func(cfg Config, port int) (bool, string, error) {
		var c incarnation.ZK = conn
		if port%2 == 0 {
			// As the shared session's handle: no Sync.
			c = noSync{conn}
		}
		inc := newIncarnationCheck(cfg, port, errIncarnationRefused, zap.NewNop())
		inc.setStore(store)
		return inc.Check(ctx, c)
	}
	mustPass := func(what string, cfg Config, port int) {
		t.Helper()
		if restored, why, err := check(cfg, port); err != nil || restored {
			t.Fatalf("%s: restored=%v why=%q err=%v; want a pass", what, restored, why, err)
		}
	}
	mustPass("node A, first start", cfgA, 9001)
	snap := map[string][]byte{}
	copyTree(t, conn, cluster.Path(incarnationRoot, name), snap)
	mustPass("node A, reconnect", cfgA, 9001)

	restoreTree(t, conn, cluster.Path(incarnationRoot, name), snap)
	restored, why, err := check(incarnationNode(t, name), 9002)
	if err != nil || !restored || !strings.Contains(why, "database recorded") {
		t.Fatalf("new node first after the restore: restored=%v why=%q err=%v; want detected through the database", restored, why, err)
	}
	if r, _, err := cluster.Read(conn, incarnationRoot, name); err != nil || r.RestoredMs == 0 {
		t.Fatalf("the cluster's meta is not marked restored: %+v, %v", r, err)
	}
	restored, why, err = check(cfgA, 9001)
	if err != nil || !restored || !strings.Contains(why, "lineage") {
		t.Fatalf("node A after the restore: restored=%v why=%q err=%v; want detected through its lineage", restored, why, err)
	}
	mustPass("node A, next reconnect", cfgA, 9001)
	b, err := os.ReadFile(cfgA.PropertiesDir + "/idgen:9001:127.0.0.1.properties")
	if err != nil || !strings.Contains(string(b), "incarnation.lineage=4:") {
		t.Fatalf("node A's properties file: %v\n%s", err, b)
	}

	// Total loss, then `idctl cluster init` again: refused.
	restoreTree(t, conn, cluster.Path(incarnationRoot, name), map[string][]byte{cluster.Path(incarnationRoot, name): nil})
	if _, err := incarnation.Create(conn, incarnationRoot, name, acl, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, _, err := check(cfgA, 9001); !errors.Is(err, incarnation.ErrRecreated) || !errors.Is(err, errIncarnationRefused) {
		t.Fatalf("re-created cluster: %v; want ErrRecreated wrapping the refusal", err)
	}
}

// noSync hides *zk.Conn's Sync, as cluster/zksession's handle does.
type noSync struct{ c *zk.Conn }

func (n noSync) Get(p string) ([]byte, *zk.Stat, error) { return n.c.Get(p) }
func (n noSync) Create(p string, d []byte, f int32, a []zk.ACL) (string, error) {
	return n.c.Create(p, d, f, a)
}
func (n noSync) Set(p string, d []byte, v int32) (*zk.Stat, error) { return n.c.Set(p, d, v) }
func (n noSync) Exists(p string) (bool, *zk.Stat, error)           { return n.c.Exists(p) }

// The witness waits for the store: a --mysql node's check does not pass
// before the database can be read; without --mysql there is no witness.
func TestIncarnationCheckWaitsForTheStore(t *testing.T) {
	inc := newIncarnationCheck(Config{ZKRoot: "/idgen", Cluster: "c1", PropertiesDir: t.TempDir(), MySQL: "set"}, 8888, errIncarnationRefused, zap.NewNop())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if _, err := inc.witness.Load(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Load before the store is open: %v, want it to wait", err)
	}
	inc.setStore(nil) // not a MySQL store
	if st, err := inc.witness.Load(context.Background()); err != nil || st.Bound {
		t.Fatalf("Load with a store that is not MySQL: %+v, %v; want unbound", st, err)
	}
	if newIncarnationCheck(Config{ZKRoot: "/idgen", Cluster: "c1", PropertiesDir: t.TempDir()}, 8888, nil, zap.NewNop()).witness != nil {
		t.Fatal("a witness without --mysql")
	}
}

// TouchEvery keeps the witness up with ZooKeeper while the session is
// usable, so a copy taken within a session is seen by a new node.
func TestIntegration_IncarnationTouchEvery(t *testing.T) {
	ctx, conn := incarnationZK(t)
	name, store := incarnationCluster(t, ctx, conn, "t")
	cfg := incarnationNode(t, name)
	inc := newIncarnationCheck(cfg, 9001, errIncarnationRefused, zap.NewNop())
	inc.setStore(store)
	if restored, why, err := inc.Check(ctx, conn); err != nil || restored {
		t.Fatalf("first check: %v %q %v", restored, why, err)
	}
	snap := map[string][]byte{}
	copyTree(t, conn, cluster.Path(incarnationRoot, name), snap) // copied within the session
	stop := inc.TouchEvery(10*time.Millisecond, &connSession{c: conn}, zap.NewNop())
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, n, _, err := store.ZKIncarnation(ctx, name)
		if err != nil {
			t.Fatal(err)
		}
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the witness stayed at %d after 30 s of touches every 10 ms", n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stop()
	restoreTree(t, conn, cluster.Path(incarnationRoot, name), snap)
	fresh := newIncarnationCheck(incarnationNode(t, name), 9002, errIncarnationRefused, zap.NewNop())
	fresh.setStore(store)
	if restored, why, err := fresh.Check(ctx, conn); err != nil || !restored {
		t.Fatalf("new node after a restore from a copy taken within the old node's session: restored=%v why=%q err=%v; want detected (touches)", restored, why, err)
	}
}

// connSession is an incarnation.Session on a plain client (always usable) that
// records the restores noted on it.
type connSession struct {
	c     *zk.Conn
	mu    sync.Mutex
	notes []string
}

func (s *connSession) Conn() zksession.ZK { return s.c }
func (s *connSession) View() zksession.View {
	s.mu.Lock()
	defer s.mu.Unlock()
	v := zksession.View{Has: true, Restores: uint64(len(s.notes))}
	if len(s.notes) > 0 {
		v.RestoreWhy = s.notes[len(s.notes)-1]
	}
	return v
}
func (s *connSession) NoteRestore(why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.notes = append(s.notes, why)
}

// The touch after a slot claim (worker.Config.AfterClaim) closes the
// window the heartbeat touch leaves: a copy of ZooKeeper taken between
// the node's last bump and its claim, then restored, is seen by a new node
// that starts first (through the database) only when the claim was
// followed by a touch; without it the copy is as current as the witness.
// The old node's next touch sees the loss, notes it on the session (every
// guard applies the restore rule at once) and refuses the claim, and its
// next check does not report it a second time (issue 29 hole h).
func TestIntegration_IncarnationTouchAfterClaim(t *testing.T) {
	ctx, conn := incarnationZK(t)
	acl := zk.WorldACL(zk.PermAll)
	for _, touch := range []bool{false, true} {
		name, store := incarnationCluster(t, ctx, conn, "a")
		cfg := incarnationNode(t, name)
		inc := newIncarnationCheck(cfg, 9001, errIncarnationRefused, zap.NewNop())
		inc.setStore(store)
		if restored, why, err := inc.Check(ctx, conn); err != nil || restored {
			t.Fatalf("first check: %v %q %v", restored, why, err)
		}
		snap := map[string][]byte{}
		copyTree(t, conn, cluster.Path(incarnationRoot, name), snap) // the copy: after the last bump, before the claim
		// The claim (a stand-in for slots/<n> and last/<n>), then the hook.
		if _, err := conn.Create(cluster.Path(incarnationRoot, name)+"/claim", []byte("x"), 0, acl); err != nil {
			t.Fatal(err)
		}
		sess := &connSession{c: conn}
		if touch {
			if err := inc.AfterClaim(sess)(ctx); err != nil {
				t.Fatalf("afterClaim on a healthy ZooKeeper: %v", err)
			}
		}
		restoreTree(t, conn, cluster.Path(incarnationRoot, name), snap)
		if err := conn.Delete(cluster.Path(incarnationRoot, name)+"/claim", -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			t.Fatal(err)
		}
		fresh := newIncarnationCheck(incarnationNode(t, name), 9002, errIncarnationRefused, zap.NewNop())
		fresh.setStore(store)
		restored, why, err := fresh.Check(ctx, conn)
		if err != nil {
			t.Fatal(err)
		}
		if restored != touch {
			t.Fatalf("touch after the claim %v: the new node's check restored=%v (%q); want %v", touch, restored, why, touch)
		}
		if !touch {
			continue // the window the touch after a claim closes
		}
		// The old node's next claim: its touch sees the loss (its counter),
		// notes it on the session, and keeps the slot from serving.
		if err := inc.AfterClaim(sess)(ctx); err == nil {
			t.Fatal("afterClaim after the restore passed; want the loss seen and the claim refused")
		}
		if v := sess.View(); v.Restores != 1 || !strings.Contains(v.RestoreWhy, "incarnation touch") {
			t.Fatalf("restores noted on the session: %d (%q); want 1 from the touch", v.Restores, v.RestoreWhy)
		}
		if restored, why, err := inc.Check(ctx, conn); err != nil || restored {
			t.Fatalf("the old node's next check: restored=%v why=%q err=%v; want it quiet (the touch reported the loss)", restored, why, err)
		}
		if err := inc.AfterClaim(sess)(ctx); err != nil {
			t.Fatalf("the claim after the noted restore: %v", err)
		}
	}
}
