package mysqllease

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/idgen/idgen/worker"
)

// fakeZK is the ZooKeeper half of a migration, in memory.
type fakeZK struct {
	mu    sync.Mutex
	meta  *worker.Meta
	held  [][2]int
	marks map[[2]int]int64
	// onHeld runs at every Held call (n counts them from 1), to model a
	// node that claims during the migration.
	onHeld func(z *fakeZK, n int)
	nHeld  int
	fail   error // returned by RaiseMarks
	// registry is what SetRegistry last recorded (only with a meta, as
	// the real registry); registries every value recorded, in order.
	registry   string
	registries []string
}

var _ ZooKeeperRegistry = (*fakeZK)(nil)

func newFakeZK() *fakeZK { return &fakeZK{marks: map[[2]int]int64{}} }

func (z *fakeZK) Meta(context.Context) (worker.Meta, bool, error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.meta == nil {
		return worker.Meta{}, false, nil
	}
	return *z.meta, true, nil
}

func (z *fakeZK) CreateMeta(_ context.Context, m worker.Meta) error {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.meta != nil {
		return errors.New("meta exists")
	}
	z.meta = &m
	return nil
}

func (z *fakeZK) Held(context.Context) ([][2]int, error) {
	z.mu.Lock()
	z.nHeld++
	n, hook := z.nHeld, z.onHeld
	z.mu.Unlock()
	if hook != nil {
		hook(z, n)
	}
	z.mu.Lock()
	defer z.mu.Unlock()
	return append([][2]int(nil), z.held...), nil
}

func (z *fakeZK) Marks(context.Context) (map[[2]int]int64, error) {
	z.mu.Lock()
	defer z.mu.Unlock()
	return maps.Clone(z.marks), nil
}

func (z *fakeZK) RaiseMarks(_ context.Context, marks map[[2]int]int64) error {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.fail != nil {
		return z.fail
	}
	for k, v := range marks {
		z.marks[k] = max(z.marks[k], v)
	}
	return nil
}

func (z *fakeZK) SetRegistry(_ context.Context, registry string) error {
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.meta != nil && z.registry != registry {
		z.registry = registry
		z.registries = append(z.registries, registry)
	}
	return nil
}

func (z *fakeZK) set(f func(z *fakeZK)) {
	z.mu.Lock()
	defer z.mu.Unlock()
	f(z)
}

func migrate(t testing.TB, zk *fakeZK, to string) error {
	t.Helper()
	db, _ := testDB(t)
	return Migrate(ctxT(t), MigrateConfig{DB: db, Cluster: t.Name(), To: to, ZooKeeper: zk})
}

func registryNow(t testing.TB) string {
	t.Helper()
	db, _ := testDB(t)
	r, _, err := ClusterRegistry(ctxT(t), db, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A MySQL cluster moves to ZooKeeper and back: refused while a slot is
// held on either side, the meta created with MySQL's created_ms, every
// target mark at least the source's, nodes of the old kind refused after.
func TestIntegration_MigrateRoundTrip(t *testing.T) {
	db, _ := testDB(t)
	ctx := ctxT(t)
	zk := newFakeZK()
	a, ha := register(t, db, Config{Port: 1})
	b, hb := register(t, db, Config{Port: 2, IDC: 1})

	// A live lease: refused, nothing changed on either side.
	err := migrate(t, zk, RegistryZooKeeper)
	if !errors.Is(err, ErrSlotsHeld) {
		t.Fatalf("Migrate with live leases: %v", err)
	}
	mustContain(t, err, "2 worker slots", "stop every node")
	if r := registryNow(t); r != RegistryMySQL || zk.meta != nil || len(zk.marks) != 0 {
		t.Fatalf("after a refused migration: registry %q, zk meta %v, marks %v", r, zk.meta, zk.marks)
	}

	ha.setLastUsed(time.Now().UnixMilli())
	hb.setLastUsed(time.Now().UnixMilli())
	for _, l := range []*Lease{a, b} {
		if err := l.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	my, live, err := Marks(ctx, db, t.Name())
	if err != nil || live || len(my) != 2 {
		t.Fatalf("Marks %v %v %v", my, live, err)
	}
	if err := migrate(t, zk, RegistryZooKeeper); err != nil {
		t.Fatalf("Migrate to ZooKeeper: %v", err)
	}
	if r := registryNow(t); r != RegistryZooKeeper {
		t.Fatalf("registry %q", r)
	}
	if zk.meta == nil || zk.meta.CreatedMs != a.Meta().CreatedMs || zk.meta.NodeBits != worker.DefaultNodeBits {
		t.Fatalf("ZooKeeper meta %+v; want MySQL's %+v", zk.meta, a.Meta())
	}
	for k, v := range my {
		if zk.marks[k] < v {
			t.Fatalf("ZooKeeper mark of %v is %d, below MySQL's %d", k, zk.marks[k], v)
		}
	}
	if _, _, err := tryRegister(t, db, Config{Port: 1}); !errors.Is(err, ErrRegistryMismatch) {
		t.Fatalf("a MySQL node after the move: %v", err)
	}
	if err := ClaimRegistry(ctx, db, t.Name(), RegistryZooKeeper, *zk.meta); err != nil {
		t.Fatalf("a ZooKeeper node after the move: %v", err)
	}
	// Again: nothing to do.
	if err := migrate(t, zk, RegistryZooKeeper); err != nil {
		t.Fatal(err)
	}

	// The ZooKeeper era: a node holds a slot, then stops with a later mark.
	far := time.Now().Add(5 * time.Second).UnixMilli()
	zk.set(func(z *fakeZK) { z.held = [][2]int{{0, 7}} })
	if err := migrate(t, zk, RegistryMySQL); !errors.Is(err, ErrSlotsHeld) {
		t.Fatalf("Migrate with a ZooKeeper slot held: %v", err)
	}
	if r := registryNow(t); r != RegistryZooKeeper {
		t.Fatalf("registry %q after a refused migration", r)
	}
	zk.set(func(z *fakeZK) { z.held = nil; z.marks[[2]int{0, 7}] = far })
	// The ZooKeeper meta is older than the row: the row takes it.
	zk.set(func(z *fakeZK) { z.meta.CreatedMs -= 1000 })
	if err := migrate(t, zk, RegistryMySQL); err != nil {
		t.Fatalf("Migrate to MySQL: %v", err)
	}
	if r := registryNow(t); r != RegistryMySQL {
		t.Fatalf("registry %q", r)
	}
	back, _, err := Marks(ctx, db, t.Name())
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range zk.marks {
		if back[k] < v {
			t.Fatalf("MySQL mark of %v is %d, below ZooKeeper's %d", k, back[k], v)
		}
	}
	if m, _, _ := readCluster(ctx, db, t.Name()); m.CreatedMs != zk.meta.CreatedMs {
		t.Fatalf("created_ms %d; want ZooKeeper's %d", m.CreatedMs, zk.meta.CreatedMs)
	}
	if err := ClaimRegistry(ctx, db, t.Name(), RegistryZooKeeper, worker.Meta{}); !errors.Is(err, ErrRegistryMismatch) {
		t.Fatalf("a ZooKeeper node after the move back: %v", err)
	}
	register(t, db, Config{Port: 1})
}

// A ZooKeeper node that claims while the migration to MySQL runs (seen
// only at the second look) stops it, and the registry returns to
// ZooKeeper; so does a mark that moves.
func TestIntegration_MigrateSeesLateZooKeeperNode(t *testing.T) {
	db, _ := testDB(t)
	ctx := ctxT(t)
	zk := newFakeZK()
	created := time.Now().Add(-time.Minute).UnixMilli()
	zk.meta = &worker.Meta{EpochMs: worker.DefaultEpochMs, IDCBits: worker.DefaultIDCBits, NodeBits: worker.DefaultNodeBits, CreatedMs: created}
	zk.marks[[2]int{0, 1}] = time.Now().UnixMilli()
	// No row yet: the cluster ran on ZooKeeper before registries were
	// recorded. A node shows up at the third look (after the import).
	zk.onHeld = func(z *fakeZK, n int) {
		if n == 3 {
			z.held = [][2]int{{0, 2}}
		}
	}
	err := migrate(t, zk, RegistryMySQL)
	if !errors.Is(err, ErrSlotsHeld) {
		t.Fatalf("Migrate with a late node: %v", err)
	}
	if r := registryNow(t); r != RegistryZooKeeper {
		t.Fatalf("registry %q; want zookeeper back", r)
	}
	if m, _, _ := readCluster(ctx, db, t.Name()); m.CreatedMs != created {
		t.Fatalf("row created_ms %d; want ZooKeeper's %d", m.CreatedMs, created)
	}

	// A mark moves between the two reads.
	zk.set(func(z *fakeZK) {
		z.held, z.nHeld = nil, 0
		z.onHeld = func(z *fakeZK, n int) {
			if n == 3 {
				z.marks[[2]int{0, 1}] += 10
			}
		}
	})
	if err := migrate(t, zk, RegistryMySQL); !errors.Is(err, ErrSlotsHeld) {
		t.Fatalf("Migrate with a moving mark: %v", err)
	} else {
		mustContain(t, err, "moved in ZooKeeper")
	}
	if r := registryNow(t); r != RegistryZooKeeper {
		t.Fatalf("registry %q; want zookeeper back", r)
	}
	zk.set(func(z *fakeZK) { z.onHeld = nil })
	if err := migrate(t, zk, RegistryMySQL); err != nil {
		t.Fatal(err)
	}
}

// Settings that differ between the registries, a ZooKeeper meta newer than
// MySQL's, or a ZooKeeper failure leave the cluster where it was; an
// interrupted migration (registry left migrating) is finished by a rerun.
func TestIntegration_MigrateRefusalsAndResume(t *testing.T) {
	db, _ := testDB(t)
	ctx := ctxT(t)
	l, h := register(t, db, Config{})
	h.setLastUsed(time.Now().UnixMilli())
	if err := l.Close(ctx); err != nil {
		t.Fatal(err)
	}
	my := l.Meta()

	zk := newFakeZK()
	other := my
	other.IDCBits, other.NodeBits = 3, 7
	zk.meta = &other
	if err := migrate(t, zk, RegistryZooKeeper); !errors.Is(err, ErrMetaMismatch) {
		t.Fatalf("other bits: %v", err)
	}
	newer := my
	newer.CreatedMs += 1000
	zk.meta = &newer
	if err := migrate(t, zk, RegistryZooKeeper); !errors.Is(err, ErrMetaMismatch) {
		t.Fatalf("newer ZooKeeper meta: %v", err)
	} else {
		mustContain(t, err, "floor", "delete its meta")
	}
	zk.meta = nil
	zk.fail = errors.New("connection lost")
	if err := migrate(t, zk, RegistryZooKeeper); err == nil {
		t.Fatal("Migrate passed with ZooKeeper failing")
	} else {
		mustContain(t, err, "connection lost", "still uses mysql")
	}
	if r := registryNow(t); r != RegistryMySQL {
		t.Fatalf("registry %q after refusals", r)
	}
	if len(zk.marks) != 0 {
		t.Fatalf("ZooKeeper marks written: %v", zk.marks)
	}

	// Interrupted after step 1: the rerun finishes from migrating.
	zk.fail = nil
	if err := SetRegistry(ctx, db, t.Name(), RegistryMySQL, RegistryMigrating); err != nil {
		t.Fatal(err)
	}
	if err := migrate(t, zk, RegistryZooKeeper); err != nil {
		t.Fatalf("resume: %v", err)
	}
	marks, _, _ := Marks(ctx, db, t.Name())
	if r := registryNow(t); r != RegistryZooKeeper || len(zk.marks) != len(marks) || len(marks) == 0 {
		t.Fatalf("after resume: registry %q, ZooKeeper marks %v, MySQL marks %v", r, zk.marks, marks)
	}

	for _, c := range []MigrateConfig{
		{ZooKeeper: zk, To: RegistryMySQL},
		{DB: db, To: RegistryMySQL},
		{DB: db, ZooKeeper: zk, To: RegistryMigrating},
	} {
		if err := Migrate(ctx, c); !errors.Is(err, worker.ErrInvalidConfig) {
			t.Fatalf("Migrate(%+v) = %v; want ErrInvalidConfig", c, err)
		}
	}
	// A cluster in neither registry.
	if err := Migrate(ctx, MigrateConfig{DB: db, Cluster: t.Name() + "-none", To: RegistryMySQL, ZooKeeper: newFakeZK()}); err == nil {
		t.Fatal("Migrate of an unknown cluster passed")
	} else {
		mustContain(t, err, "neither in MySQL", "nothing to migrate")
	}
}

// The ZooKeeper record says migrating before Migrate looks for held slots
// after marking MySQL (a node whose session expired, which Held cannot
// see, refuses at its next claim), the target when done, and its old
// value when the migration is abandoned.
func TestIntegration_MigrateMarksZooKeeperRecord(t *testing.T) {
	zk := newFakeZK()
	created := time.Now().Add(-time.Minute).UnixMilli()
	zk.meta = &worker.Meta{EpochMs: worker.DefaultEpochMs, IDCBits: worker.DefaultIDCBits, NodeBits: worker.DefaultNodeBits, CreatedMs: created}
	var atSecondLook string
	zk.onHeld = func(z *fakeZK, n int) {
		if n == 2 {
			atSecondLook = z.registry
		}
		if n == 3 {
			z.held = [][2]int{{0, 2}} // a node claimed: abandoned
		}
	}
	if err := migrate(t, zk, RegistryMySQL); !errors.Is(err, ErrSlotsHeld) {
		t.Fatalf("Migrate with a late node: %v", err)
	}
	if atSecondLook != RegistryMigrating {
		t.Fatalf("ZooKeeper record said %q when Migrate looked for held slots; want migrating", atSecondLook)
	}
	if zk.registry != RegistryZooKeeper {
		t.Fatalf("ZooKeeper record says %q after the abandoned migration (history %v); want zookeeper", zk.registry, zk.registries)
	}
	zk.set(func(z *fakeZK) { z.held, z.onHeld, z.registries = nil, nil, nil })
	if err := migrate(t, zk, RegistryMySQL); err != nil {
		t.Fatal(err)
	}
	if want := []string{RegistryMigrating, RegistryMySQL}; !slices.Equal(zk.registries, want) {
		t.Fatalf("ZooKeeper record history %v; want %v", zk.registries, want)
	}
	// Back to ZooKeeper: the record ends saying zookeeper again.
	if err := migrate(t, zk, RegistryZooKeeper); err != nil {
		t.Fatal(err)
	}
	if zk.registry != RegistryZooKeeper {
		t.Fatalf("ZooKeeper record says %q after the move back; want zookeeper", zk.registry)
	}
}
