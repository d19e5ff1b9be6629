package mysqllease

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/internal/zkproxy"
	"github.com/idgen/idgen/worker"
)

const zkTestRoot = "/idgen-test"

// Issue 29, hole m: `idctl cluster migrate --to mysql` while a ZooKeeper
// node's session has expired. The node is cut off from ZooKeeper (a
// blocking proxy) until the server expires its session: its slot claim is
// gone, so Held does not see it, and the migration moves the cluster to
// MySQL. When the node reaches ZooKeeper again it gets a new session and
// re-claims a slot. Before the fix that re-claim never looked at the
// registry again: the node acquired a ZooKeeper slot and served in a
// cluster whose slots MySQL now hands out, one worker ID on two nodes. The
// migration now marks the cluster's record in ZooKeeper (registry
// migrating, then mysql) before it looks for held slots, and a node reads
// the record after every claim: the re-claim is refused and the lease
// stops for good (a restart with the cluster's registry is the fix).
func TestIntegration_MigrateFencesNodeWithExpiredSession(t *testing.T) {
	if faultNoRegistryFenceSet() {
		t.Skip("IDGEN_FAULT_NO_REGISTRY_FENCE=1: the control TestIntegration_MigrateFenceControl runs instead")
	}
	r := migrateWithExpiredSession(t)
	if r.reclaimed {
		t.Fatalf("the node re-claimed a ZooKeeper slot (held now: %v) after the cluster moved to MySQL: a MySQL node may take the same worker", r.held)
	}
	if r.state == worker.StateRegistered {
		t.Fatalf("lease state %v after the refusal", r.state)
	}
	if len(r.held) != 0 {
		t.Fatalf("held in ZooKeeper after the refusal: %v; want none (the claim released)", r.held)
	}
	if r.record != RegistryMySQL {
		t.Fatalf("ZooKeeper record's registry %q; want mysql", r.record)
	}
}

// expiredSessionRun is what migrateWithExpiredSession saw once the node
// reached ZooKeeper again.
type expiredSessionRun struct {
	reclaimed bool // the node acquired a slot again
	state     worker.State
	held      [][2]int
	record    string // the cluster record's registry in ZooKeeper
}

// migrateWithExpiredSession runs hole m's history: one ZooKeeper node,
// cut off until its session expired, the cluster migrated to MySQL, the
// node back; it returns once the node re-claimed a slot or its lease
// stopped on ErrRegistryMoved (30 s at most).
func migrateWithExpiredSession(t *testing.T) expiredSessionRun {
	db, _ := testDB(t)
	addr := os.Getenv("IDGEN_TEST_ZK")
	if addr == "" {
		t.Skip("IDGEN_TEST_ZK not set: integration test needs ZooKeeper (source .testenv, or ./build.sh test)")
	}
	ctx := ctxT(t)
	name := fmt.Sprintf("%s-%d", strings.ReplaceAll(t.Name(), "/", "-"), time.Now().UnixNano())
	c, err := worker.DialZK(ctx, []string{addr}, 10*time.Second, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	if _, err := cluster.Init(c, zkTestRoot, name, cluster.Settings{EpochMs: worker.DefaultEpochMs, IDCBits: worker.DefaultIDCBits,
		NodeBits: worker.DefaultNodeBits}, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	reg := worker.ZKRegistry{Conn: c, Root: zkTestRoot, Cluster: name}
	zm, _, err := reg.Meta(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := ClaimRegistry(ctx, db, name, RegistryZooKeeper, zm); err != nil {
		t.Fatal(err)
	}

	proxy := zkproxy.New(t, addr)
	h := newHolder()
	core, logs := observer.New(zapcore.InfoLevel)
	l, err := worker.Register(ctx, worker.Config{Servers: []string{proxy.Addr()}, Root: zkTestRoot, Cluster: name,
		Host: "127.0.0.1", Port: 7000, PropertiesDir: t.TempDir(), SessionTimeout: 2 * time.Second,
		HeartbeatInterval: 200 * time.Millisecond, HighWaterMargin: 200 * time.Millisecond, OutageTolerance: 300 * time.Millisecond,
		MaxPeerClockSkew: 100 * time.Millisecond, ConnectTimeout: 5 * time.Second, Holder: h, Version: "it",
		Logger: zap.New(core)})
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	t.Cleanup(func() { _ = l.Close(ctxT(t)) })
	if n, _, _ := h.counts(); n != 1 {
		t.Fatalf("acquired %d slots at start; want 1", n)
	}

	// Cut the node off until ZooKeeper expired its session: its claim is
	// gone, the migration sees no node.
	proxy.Block()
	waitFor(t, "the node's session expired (no slot held)", func() bool {
		held, err := reg.Held(ctx)
		return err == nil && len(held) == 0
	})
	if err := Migrate(ctx, MigrateConfig{DB: db, Cluster: name, To: RegistryMySQL, ZooKeeper: reg}); err != nil {
		t.Fatalf("Migrate with the only node's session expired: %v", err)
	}
	if r, _, err := ClusterRegistry(ctx, db, name); err != nil || r != RegistryMySQL {
		t.Fatalf("registry %q (%v) after the migration; want mysql", r, err)
	}

	// The node reaches ZooKeeper again: its re-claim must be refused.
	proxy.Unblock()
	// The refusal shows in the lease's log (it stops: "worker lease
	// stopped", with the error).
	refused := func() bool {
		for _, e := range logs.All() {
			for _, f := range e.Context {
				if err, ok := f.Interface.(error); ok && errors.Is(err, worker.ErrRegistryMoved) {
					return true
				}
			}
		}
		return false
	}
	waitFor(t, "the node's re-claim refused or a slot re-claimed", func() bool {
		n, _, _ := h.counts()
		return n > 1 || refused()
	})
	var r expiredSessionRun
	n, _, _ := h.counts()
	r.reclaimed, r.state = n > 1, l.State()
	if r.held, err = reg.Held(ctx); err != nil {
		t.Fatal(err)
	}
	rec, _, err := cluster.Read(c, zkTestRoot, name)
	if err != nil {
		t.Fatal(err)
	}
	r.record = rec.Registry
	return r
}
