package mysqllease

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/idgen/idgen/clock/clocktest"
	"github.com/idgen/idgen/worker"
)

// A MySQL-held cluster refuses a ZooKeeper node, naming both fixes;
// ClaimRegistry of its own kind passes.
func TestIntegration_ClaimRegistryRefusesMySQLCluster(t *testing.T) {
	db, _ := testDB(t)
	register(t, db, Config{})
	err := ClaimRegistry(ctxT(t), db, t.Name(), RegistryZooKeeper, worker.Meta{})
	if !errors.Is(err, ErrRegistryMismatch) {
		t.Fatalf("err %v, want ErrRegistryMismatch", err)
	}
	mustContain(t, err, "holds its worker slots in MySQL (worker_slot)", "this node uses ZooKeeper (--zk)", "without --zk",
		"stop every node", "idctl cluster migrate --cluster "+t.Name()+" --mysql DSN --zk HOSTS --to zookeeper")
	if err := ClaimRegistry(ctxT(t), db, t.Name(), RegistryMySQL, worker.Meta{}); err != nil {
		t.Fatalf("ClaimRegistry(mysql) of a MySQL cluster: %v", err)
	}
}

// ClaimRegistry creates a ZooKeeper cluster's row with the given created_ms
// and is idempotent; a MySQL node is refused with the fix, and a ZooKeeper
// node with other settings with ErrMetaMismatch.
func TestIntegration_ClaimRegistryZooKeeper(t *testing.T) {
	db, _ := testDB(t)
	ctx := ctxT(t)
	created := time.Now().Add(-time.Hour).UnixMilli()
	for i := 0; i < 2; i++ {
		if err := ClaimRegistry(ctx, db, t.Name(), RegistryZooKeeper, worker.Meta{CreatedMs: created}); err != nil {
			t.Fatalf("ClaimRegistry #%d: %v", i, err)
		}
	}
	// Without a created_ms: the row's stays.
	if err := ClaimRegistry(ctx, db, t.Name(), RegistryZooKeeper, worker.Meta{}); err != nil {
		t.Fatal(err)
	}
	m, reg, err := readCluster(ctx, db, t.Name())
	if err != nil || reg != RegistryZooKeeper || m.CreatedMs != created || m.IDCBits != worker.DefaultIDCBits || m.EpochMs != worker.DefaultEpochMs {
		t.Fatalf("row %+v %q %v; want zookeeper, created_ms %d, defaults", m, reg, err, created)
	}
	if r, ok, err := ClusterRegistry(ctx, db, t.Name()); err != nil || !ok || r != RegistryZooKeeper {
		t.Fatalf("ClusterRegistry = %q %v %v", r, ok, err)
	}
	if _, ok, err := ClusterRegistry(ctx, db, t.Name()+"-none"); err != nil || ok {
		t.Fatalf("ClusterRegistry of no cluster: ok %v, %v", ok, err)
	}

	err = ClaimRegistry(ctx, db, t.Name(), RegistryZooKeeper, worker.Meta{IDCBits: 3, NodeBits: 7})
	if !errors.Is(err, ErrMetaMismatch) || !errors.Is(err, worker.ErrMetaMismatch) {
		t.Fatalf("other settings: %v, want a meta mismatch", err)
	}

	_, _, err = tryRegister(t, db, Config{})
	if !errors.Is(err, ErrRegistryMismatch) {
		t.Fatalf("Register on a ZooKeeper cluster: %v, want ErrRegistryMismatch", err)
	}
	mustContain(t, err, "holds its worker slots in ZooKeeper", "--mysql without --zk", "Start it with --zk HOSTS",
		"idctl cluster migrate --cluster "+t.Name()+" --mysql DSN --zk HOSTS --to mysql")
	// The refused node wrote nothing.
	if marks, _, err := Marks(ctx, db, t.Name()); err != nil || len(marks) != 0 {
		t.Fatalf("Marks after a refused Register: %v, %v", marks, err)
	}

	for _, c := range []struct {
		name, registry string
		meta           worker.Meta
		want           string
	}{
		{"x", "etcd", worker.Meta{}, "registry"},
		{"x", RegistryMigrating, worker.Meta{}, "registry"},
		{"bad\n", RegistryZooKeeper, worker.Meta{}, "cluster"},
		{"x", RegistryZooKeeper, worker.Meta{IDCBits: 1, NodeBits: 1}, "IDCBits"},
		{"x", RegistryZooKeeper, worker.Meta{CreatedMs: -1}, "CreatedMs"},
	} {
		err := ClaimRegistry(ctx, db, c.name, c.registry, c.meta)
		if !errors.Is(err, worker.ErrInvalidConfig) {
			t.Fatalf("ClaimRegistry(%q, %q, %+v) = %v; want ErrInvalidConfig", c.name, c.registry, c.meta, err)
		}
		mustContain(t, err, c.want)
	}
}

// Nodes of both kinds starting at once on a new cluster: one kind wins,
// every node of the other is refused.
func TestIntegration_ClaimRegistryRacesRegister(t *testing.T) {
	db, _ := testDB(t)
	for round := 0; round < 5; round++ {
		cluster := fmt.Sprintf("%s-%d", t.Name(), round)
		var wg sync.WaitGroup
		var mu sync.Mutex
		won := map[string]int{}
		for i := 0; i < 4; i++ {
			wg.Go(func() {
				if err := ClaimRegistry(ctxT(t), db, cluster, RegistryZooKeeper, worker.Meta{}); err == nil {
					mu.Lock()
					won[RegistryZooKeeper]++
					mu.Unlock()
				} else if !errors.Is(err, ErrRegistryMismatch) {
					t.Errorf("ClaimRegistry: %v", err)
				}
			})
			wg.Go(func() {
				if _, _, err := tryRegister(t, db, Config{Cluster: cluster, Port: 100 + i}); err == nil {
					mu.Lock()
					won[RegistryMySQL]++
					mu.Unlock()
				} else if !errors.Is(err, ErrRegistryMismatch) {
					t.Errorf("Register: %v", err)
				}
			})
		}
		wg.Wait()
		if len(won) != 1 || won[RegistryMySQL]+won[RegistryZooKeeper] != 4 {
			t.Fatalf("round %d: successes by kind %v; want 4 of one kind", round, won)
		}
	}
}

// Marks reports every slot's mark and whether a lease is live;
// SetRegistry refuses while one is, changes only from the expected value,
// and fences a paused holder whose lease had expired; no claim passes
// after the cluster left MySQL.
func TestIntegration_MarksAndSetRegistry(t *testing.T) {
	db, _ := testDB(t)
	ctx := ctxT(t)
	a, ha := register(t, db, Config{Port: 1, HeartbeatInterval: time.Hour})
	b, hb := register(t, db, Config{Port: 2, HeartbeatInterval: time.Hour})
	sa, _ := a.Slot()
	sb, _ := b.Slot()
	marks, live, err := Marks(ctx, db, t.Name())
	if err != nil || !live || len(marks) != 2 {
		t.Fatalf("Marks = %v, live %v, %v; want 2 slots, live", marks, live, err)
	}
	if marks[[2]int{0, sa.Node}] != ha.durableMark() || marks[[2]int{0, sb.Node}] != hb.durableMark() {
		t.Fatalf("Marks %v; want the durable marks %d, %d", marks, ha.durableMark(), hb.durableMark())
	}

	err = SetRegistry(ctx, db, t.Name(), RegistryMySQL, RegistryMigrating)
	if !errors.Is(err, ErrSlotsHeld) {
		t.Fatalf("SetRegistry with live leases: %v, want ErrSlotsHeld", err)
	}
	mustContain(t, err, "2 worker slots", "10.0.0.1:1", "stop every node")

	// a stops cleanly; b is paused past its lease (expired in the database).
	hb.setLastUsed(hb.durableMark())
	ha.setLastUsed(time.Now().UnixMilli())
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	expireLease(t, db, t.Name(), 0, sb.Node)
	before := readRow(t, db, t.Name(), 0, sb.Node)
	if _, live, _ := Marks(ctx, db, t.Name()); live {
		t.Fatal("Marks: live after the leases ended")
	}

	// Conditional: the registry is mysql, not zookeeper.
	err = SetRegistry(ctx, db, t.Name(), RegistryZooKeeper, RegistryMigrating)
	if !errors.Is(err, ErrRegistryMismatch) {
		t.Fatalf("SetRegistry from the wrong value: %v", err)
	}
	mustContain(t, err, `is "mysql", not the expected "zookeeper"`)
	if r, _, _ := ClusterRegistry(ctx, db, t.Name()); r != RegistryMySQL {
		t.Fatalf("registry %q after a refused change", r)
	}
	if err := SetRegistry(ctx, db, t.Name(), RegistryMySQL, RegistryMigrating); err != nil {
		t.Fatalf("SetRegistry: %v", err)
	}
	after := readRow(t, db, t.Name(), 0, sb.Node)
	if after.holder.Valid || after.gen != before.gen+1 || after.highWater != before.highWater {
		t.Fatalf("row after SetRegistry %+v (before %+v): want no holder, gen+1, same mark", after, before)
	}

	// The paused holder wakes up: its write finds another gen, it fences,
	// and its re-claim is refused by the registry.
	b.RequestExtend()
	waitFor(t, "the paused holder to fence", func() bool { _, _, f := hb.counts(); return f > 0 })
	if !errors.Is(hb.lastFence(), worker.ErrSlotTaken) {
		t.Fatalf("fenced with %v", hb.lastFence())
	}
	if got := readRow(t, db, t.Name(), 0, sb.Node); got.highWater != before.highWater || got.holder.Valid {
		t.Fatalf("row after the late write %+v; want the mark %d, no holder", got, before.highWater)
	}
	// Its re-claim (the heartbeat's, after the fence) checks the registry
	// under the cluster row's lock.
	if _, err := b.claim(ctx); !errors.Is(err, ErrRegistryMismatch) {
		t.Fatalf("re-claim while migrating: %v", err)
	}
	if _, _, err := tryRegister(t, db, Config{Port: 3}); !errors.Is(err, ErrRegistryMismatch) {
		t.Fatalf("Register while migrating: %v", err)
	} else {
		mustContain(t, err, "being moved between worker registries", "run it again")
	}
	if err := ClaimRegistry(ctx, db, t.Name(), RegistryZooKeeper, worker.Meta{}); !errors.Is(err, ErrRegistryMismatch) {
		t.Fatalf("ClaimRegistry while migrating: %v", err)
	}

	// Back to MySQL: nodes start again, above the marks.
	if err := SetRegistry(ctx, db, t.Name(), RegistryMigrating, RegistryMySQL); err != nil {
		t.Fatal(err)
	}
	c, _ := register(t, db, Config{Port: 1})
	if _, ok := c.Slot(); !ok {
		t.Fatal("no slot after moving back")
	}
	for _, bad := range [][2]string{{"mysql", "mysql"}, {"etcd", "mysql"}, {"mysql", ""}} {
		if err := SetRegistry(ctx, db, t.Name(), bad[0], bad[1]); !errors.Is(err, worker.ErrInvalidConfig) {
			t.Fatalf("SetRegistry(%q, %q) = %v; want ErrInvalidConfig", bad[0], bad[1], err)
		}
	}
}

// ImportMarks raises marks and never lowers one, creates rows for slots
// never used in MySQL, refuses while MySQL holds the cluster; a node that
// takes an imported slot waits past its mark.
func TestIntegration_ImportMarks(t *testing.T) {
	db, _ := testDB(t)
	ctx := ctxT(t)
	if err := ClaimRegistry(ctx, db, t.Name(), RegistryZooKeeper, worker.Meta{IDCBits: oneSlot.IDCBits, NodeBits: oneSlot.NodeBits}); err != nil {
		t.Fatal(err)
	}
	now := time.Now().UnixMilli()
	k0, k1 := [2]int{0, 0}, [2]int{1, 0}
	if err := ImportMarks(ctx, db, t.Name(), map[[2]int]int64{k0: now + 3000, k1: 100}); err != nil {
		t.Fatal(err)
	}
	r0 := readRow(t, db, t.Name(), 0, 0)
	if r0.highWater != now+3000 || r0.holder.Valid || r0.gen != 1 {
		t.Fatalf("imported row %+v", r0)
	}
	// Lower: unchanged (gen too). Higher: raised, gen+1.
	if err := ImportMarks(ctx, db, t.Name(), map[[2]int]int64{k0: 5, k1: 200}); err != nil {
		t.Fatal(err)
	}
	if r := readRow(t, db, t.Name(), 0, 0); r.highWater != now+3000 || r.gen != 1 {
		t.Fatalf("a lower import changed the row: %+v", r)
	}
	if r := readRow(t, db, t.Name(), 1, 0); r.highWater != 200 || r.gen != 2 {
		t.Fatalf("a higher import: %+v; want mark 200, gen 2", r)
	}
	if err := ImportMarks(ctx, db, t.Name(), map[[2]int]int64{{0, 1}: 1}); !errors.Is(err, worker.ErrInvalidConfig) {
		t.Fatalf("a slot outside the split: %v", err)
	}
	if err := ImportMarks(ctx, db, t.Name(), map[[2]int]int64{k0: -1}); !errors.Is(err, worker.ErrInvalidConfig) {
		t.Fatalf("a negative mark: %v", err)
	}
	if err := ImportMarks(ctx, db, t.Name()+"-none", map[[2]int]int64{k0: 1}); err == nil {
		t.Fatal("ImportMarks on a cluster without a row passed")
	}

	if err := SetRegistry(ctx, db, t.Name(), RegistryZooKeeper, RegistryMySQL); err != nil {
		t.Fatal(err)
	}
	clk := clocktest.New(time.UnixMilli(now))
	l, h := register(t, db, Config{Meta: oneSlot, Clock: clk})
	if s, _ := l.Slot(); s.NotBefore != now+3000 || h.durableMark() <= now+3000 {
		t.Fatalf("slot %+v, mark %d; want NotBefore %d (the imported mark)", s, h.durableMark(), now+3000)
	}
	if err := ImportMarks(ctx, db, t.Name(), map[[2]int]int64{k1: 300}); !errors.Is(err, ErrRegistryMismatch) {
		t.Fatalf("ImportMarks on a MySQL-held cluster: %v", err)
	}
}

// A database at schema 3 (no registry column): Register asks for the
// migration.
func TestIntegration_RegistryColumnMissing(t *testing.T) {
	db, _ := privateDB(t)
	if _, err := db.ExecContext(ctxT(t), `ALTER TABLE worker_cluster DROP COLUMN registry`); err != nil {
		t.Fatal(err)
	}
	_, _, err := tryRegister(t, db, Config{})
	if !errors.Is(err, ErrNoSchema) {
		t.Fatalf("err %v, want ErrNoSchema", err)
	}
	mustContain(t, err, "idctl db migrate", "schema version 4")
}

func TestRegistryMismatchMessages(t *testing.T) {
	for _, c := range []struct {
		cluster, have, want string
		parts               []string
	}{
		{"prod", RegistryMySQL, RegistryZooKeeper, []string{"in MySQL", "without --zk", "--cluster prod ", "--to zookeeper"}},
		{"prod", RegistryZooKeeper, RegistryMySQL, []string{"in ZooKeeper", "with --zk HOSTS", "--to mysql"}},
		{"prod", RegistryMigrating, RegistryMySQL, []string{"being moved", "run it again"}},
		{"prod", "etcd", RegistryMySQL, []string{`"etcd"`, "does not know"}},
		{"my cluster", RegistryMySQL, RegistryZooKeeper, []string{"--cluster 'my cluster' "}},
	} {
		err := registryMismatch(c.cluster, c.have, c.want)
		if !errors.Is(err, ErrRegistryMismatch) {
			t.Fatalf("%v", err)
		}
		mustContain(t, err, c.parts...)
	}
}
