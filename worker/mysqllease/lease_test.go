package mysqllease

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/idgen/idgen/clock/clocktest"
	"github.com/idgen/idgen/worker"
)

// oneSlot is a bit split with a single node per IDC: the second live node
// of an IDC finds it full.
var oneSlot = worker.Meta{IDCBits: 10, NodeBits: 0}

func TestIntegration_TwoLeasesDistinctWorkers(t *testing.T) {
	db, _ := testDB(t)
	a, ha := register(t, db, Config{Port: 1, Version: "test"})
	b, hb := register(t, db, Config{Port: 2, Version: "test"})
	sa, oka := a.Slot()
	sb, okb := b.Slot()
	if !oka || !okb {
		t.Fatalf("Slot: %v %v", oka, okb)
	}
	if sa.Worker == sb.Worker {
		t.Fatalf("two leases got worker %d", sa.Worker)
	}
	if n, _, _ := ha.counts(); n != 1 {
		t.Fatalf("holder a: Acquired %d times", n)
	}
	if n, _, _ := hb.counts(); n != 1 {
		t.Fatalf("holder b: Acquired %d times", n)
	}
	if a.State() != worker.StateRegistered {
		t.Fatalf("state %v", a.State())
	}
	if m := a.Meta(); m.IDCBits != worker.DefaultIDCBits || m.NodeBits != worker.DefaultNodeBits || m.EpochMs != worker.DefaultEpochMs || m.CreatedMs == 0 {
		t.Fatalf("Meta = %+v", m)
	}
	if a.Meta().CreatedMs != b.Meta().CreatedMs {
		t.Fatalf("created_ms differs: %d %d", a.Meta().CreatedMs, b.Meta().CreatedMs)
	}
	ws, err := a.Workers(ctxT(t), -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 2 || ws[0].Worker == ws[1].Worker || !ws[0].SlotHeld || !ws[1].SlotHeld || ws[0].Host != "10.0.0.1" || ws[0].Version != "test" {
		t.Fatalf("Workers = %+v", ws)
	}
	if ws, err := a.Workers(ctxT(t), 1); err != nil || len(ws) != 0 {
		t.Fatalf("Workers(idc 1) = %+v, %v", ws, err)
	}
	// Heartbeats extend the mark, conditional writes keep succeeding.
	a.RequestExtend()
	waitFor(t, "an Extended call", func() bool { _, n, _ := ha.counts(); return n > 0 })
	if _, _, f := ha.counts(); f != 0 {
		t.Fatalf("fenced: %v", ha.lastFence())
	}
}

// Many nodes start at once on an IDC with four slots: four get distinct
// slots, the others are refused, none shares a slot.
func TestIntegration_ConcurrentRegisterNeverSharesSlot(t *testing.T) {
	db, _ := testDB(t)
	meta := worker.Meta{IDCBits: 8, NodeBits: 2}
	const n = 20
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		leases []*Lease
		errs   []error
	)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, _, err := tryRegister(t, db, Config{Meta: meta, IDC: 3, Port: 1000 + i})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			leases = append(leases, l)
		}()
	}
	wg.Wait()
	if len(leases) != 4 {
		t.Fatalf("%d leases registered, want 4 (errors: %v)", len(leases), errs)
	}
	for _, err := range errs {
		if !errors.Is(err, ErrIDCFull) || !errors.Is(err, worker.ErrNoFreeSlot) {
			t.Fatalf("refusal %v is not ErrIDCFull", err)
		}
	}
	seen := map[int]bool{}
	for _, l := range leases {
		s, _ := l.Slot()
		if seen[s.Worker] {
			t.Fatalf("worker %d given twice", s.Worker)
		}
		seen[s.Worker] = true
		if r := readRow(t, db, t.Name(), 3, s.Node); r.holder.String != l.id {
			t.Fatalf("row of node %d names holder %q, lease is %q", s.Node, r.holder.String, l.id)
		}
	}
}

// A crashed holder's slot (no Close) is not taken while its lease lives;
// after expiry it is, and the taker's NotBefore covers everything the
// crashed holder may have issued.
func TestIntegration_CrashedHolderSlotTakenAfterExpiry(t *testing.T) {
	db, _ := testDB(t)
	clk := clocktest.New(time.Now())
	a, ha := register(t, db, Config{Meta: oneSlot, Clock: clk})
	clk.Add(100 * time.Millisecond)
	a.RequestExtend()
	waitFor(t, "a heartbeat", func() bool { _, n, _ := ha.counts(); return n > 0 })
	a.crash()
	durable := ha.durableMark()

	if _, _, err := tryRegister(t, db, Config{Meta: oneSlot, Clock: clk, Port: 2}); !errors.Is(err, ErrIDCFull) {
		t.Fatalf("slot of a crashed holder with a live lease taken: err %v", err)
	}
	expireLease(t, db, t.Name(), 0, 0)
	b, hb := register(t, db, Config{Meta: oneSlot, Clock: clk, Port: 2})
	s, _ := b.Slot()
	if s.NotBefore < durable {
		t.Fatalf("new holder's NotBefore %d is below the crashed holder's durable mark %d", s.NotBefore, durable)
	}
	if s.HighWater <= s.NotBefore {
		t.Fatalf("HighWater %d not above NotBefore %d", s.HighWater, s.NotBefore)
	}
	if hb.acquired[0] != s {
		t.Fatalf("holder got %+v, Slot() = %+v", hb.acquired[0], s)
	}
	if r := readRow(t, db, t.Name(), 0, 0); r.holder.String != b.id || r.highWater != s.HighWater {
		t.Fatalf("row %+v after the takeover", r)
	}
}

// A write conditional on an old gen changes nothing; the old holder's
// heartbeat finds the slot taken and fences at once, and the successor's
// mark stays.
func TestIntegration_StaleWriteFencesOldHolder(t *testing.T) {
	db, _ := testDB(t)
	clk := clocktest.New(time.Now())
	a, ha := register(t, db, Config{Meta: oneSlot, Clock: clk, HeartbeatInterval: time.Hour})
	oldGen := readRow(t, db, t.Name(), 0, 0).gen

	expireLease(t, db, t.Name(), 0, 0)
	b, _ := register(t, db, Config{Meta: oneSlot, Clock: clk, Port: 2, HeartbeatInterval: time.Hour})
	sb, _ := b.Slot()
	before := readRow(t, db, t.Name(), 0, 0)

	// A late write of the old holder, exactly as the heartbeat writes it.
	res, err := db.ExecContext(ctxT(t), `UPDATE worker_slot SET high_water_ms = 1, gen = gen + 1 WHERE cluster = ? AND idc = ? AND node = ? AND holder = ? AND gen = ?`,
		t.Name(), 0, 0, a.id, oldGen)
	if err != nil {
		t.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n != 0 {
		t.Fatalf("stale write changed %d rows", n)
	}
	_, extBefore, _ := ha.counts()
	a.RequestExtend()
	waitFor(t, "the old holder to fence", func() bool { _, _, f := ha.counts(); return f > 0 })
	if err := ha.lastFence(); !errors.Is(err, worker.ErrSlotTaken) || !errors.Is(err, worker.ErrFenced) {
		t.Fatalf("fence reason %v", err)
	}
	if _, ext, _ := ha.counts(); ext != extBefore {
		t.Fatalf("old holder extended after losing the slot")
	}
	if a.State() != worker.StateFenced {
		t.Fatalf("state %v, want fenced", a.State())
	}
	if _, ok := a.Slot(); ok {
		t.Fatal("fenced lease still reports a slot")
	}
	after := readRow(t, db, t.Name(), 0, 0)
	if after != before || after.highWater != sb.HighWater {
		t.Fatalf("successor's row changed: %+v -> %+v", before, after)
	}
	// The fenced lease tries to take a slot again; the IDC is full, so it
	// stays fenced.
	a.RequestExtend()
	time.Sleep(50 * time.Millisecond)
	if a.State() != worker.StateFenced {
		t.Fatalf("state %v after a re-claim on a full IDC", a.State())
	}
}

// A fenced lease takes a slot again when one is free, with NotBefore from
// that slot's mark.
func TestIntegration_FencedLeaseReclaims(t *testing.T) {
	db, _ := testDB(t)
	meta := worker.Meta{IDCBits: 9, NodeBits: 1} // two slots
	a, ha := register(t, db, Config{Meta: meta, HeartbeatInterval: time.Hour})
	sa, _ := a.Slot()
	// Someone takes a's slot by hand (as an expired lease would allow).
	if _, err := db.ExecContext(ctxT(t), `UPDATE worker_slot SET holder = 'someone-else', gen = gen + 1, high_water_ms = high_water_ms + 5 WHERE cluster = ? AND node = ?`, t.Name(), sa.Node); err != nil {
		t.Fatal(err)
	}
	a.RequestExtend()
	waitFor(t, "fence", func() bool { _, _, f := ha.counts(); return f > 0 })
	a.RequestExtend()
	waitFor(t, "re-claim", func() bool { n, _, _ := ha.counts(); return n == 2 })
	s2, ok := a.Slot()
	if !ok || s2.Node == sa.Node || a.State() != worker.StateRegistered {
		t.Fatalf("re-claimed %+v ok=%v state %v (lost node %d)", s2, ok, a.State(), sa.Node)
	}
}

// Close writes the exact last-used millisecond and releases the slot; a
// restart of the same host:port takes the same slot back with NotBefore =
// that mark and can serve at once.
func TestIntegration_CloseWritesExactMarkRestartResumes(t *testing.T) {
	db, _ := testDB(t)
	clk := clocktest.New(time.Now())
	a, ha := register(t, db, Config{Port: 7, Clock: clk})
	sa, _ := a.Slot()
	exact := clk.Now().UnixMilli() + 3
	ha.setLastUsed(exact)
	clk.Add(time.Second)
	if err := a.Close(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	if err := ha.lastFence(); !errors.Is(err, worker.ErrClosed) {
		t.Fatalf("Close fenced with %v, want ErrClosed", err)
	}
	if a.State() != worker.StateNone {
		t.Fatalf("state after Close %v", a.State())
	}
	r := readRow(t, db, t.Name(), 0, sa.Node)
	if r.highWater != exact || r.holder.Valid || r.leaseUntil != 0 || r.releasedAt == 0 {
		t.Fatalf("row after Close %+v, want high_water %d, no holder, lease 0, released", r, exact)
	}
	if err := a.Close(ctxT(t)); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	ws, err := ListWorkers(ctxT(t), db, t.Name(), -1)
	if err != nil || len(ws) != 0 {
		t.Fatalf("workers after Close: %+v, %v", ws, err)
	}

	// Another host prefers a never-used slot (least recently used) ...
	o, _ := register(t, db, Config{Host: "10.0.0.2", Port: 7, Clock: clk})
	if so, _ := o.Slot(); so.Node == sa.Node {
		t.Fatalf("another host took the just released node %d", so.Node)
	}
	// ... the restarted node takes its own slot back.
	b, _ := register(t, db, Config{Port: 7, Clock: clk})
	sb, _ := b.Slot()
	if sb.Node != sa.Node || sb.NotBefore != exact {
		t.Fatalf("restart got %+v, want node %d NotBefore %d", sb, sa.Node, exact)
	}
	if sb.NotBefore >= clk.Now().UnixMilli() {
		t.Fatalf("restart has to wait: NotBefore %d, now %d", sb.NotBefore, clk.Now().UnixMilli())
	}
}

func TestIntegration_MetaMismatchRefused(t *testing.T) {
	db, _ := testDB(t)
	register(t, db, Config{})
	_, _, err := tryRegister(t, db, Config{Meta: worker.Meta{IDCBits: 3, NodeBits: 7}})
	if !errors.Is(err, ErrMetaMismatch) || !errors.Is(err, worker.ErrMetaMismatch) {
		t.Fatalf("err %v, want a meta mismatch", err)
	}
	mustContain(t, err, "idc_bits is 2", "but 3", "worker_cluster")
	_, _, err = tryRegister(t, db, Config{Meta: worker.Meta{EpochMs: worker.DefaultEpochMs + 1000}})
	mustContain(t, err, "epoch_ms")
	// Another cluster name is another cluster.
	register(t, db, Config{Cluster: t.Name() + "-2", Meta: worker.Meta{IDCBits: 3, NodeBits: 7}})
}

func TestIntegration_IDCFullRefused(t *testing.T) {
	db, _ := testDB(t)
	register(t, db, Config{Meta: oneSlot, IDC: 5})
	_, _, err := tryRegister(t, db, Config{Meta: oneSlot, IDC: 5, Port: 2})
	if !errors.Is(err, ErrIDCFull) {
		t.Fatalf("err %v, want ErrIDCFull", err)
	}
	mustContain(t, err, "idc 5", "held by live nodes", "stop a node", "--idc")
	// Another IDC has room.
	register(t, db, Config{Meta: oneSlot, IDC: 6, Port: 2})
}

func TestIntegration_ClockSkewRefused(t *testing.T) {
	db, _ := testDB(t)
	clk := clocktest.New(time.Now().Add(time.Hour))
	_, _, err := tryRegister(t, db, Config{Clock: clk})
	if !errors.Is(err, ErrClockSkew) || !errors.Is(err, worker.ErrClockSkew) {
		t.Fatalf("err %v, want ErrClockSkew", err)
	}
	mustContain(t, err, "ahead of the database", "MaxClockSkew")
}

func TestIntegration_NoSchemaRefused(t *testing.T) {
	db, _ := privateDB(t)
	if _, err := db.ExecContext(ctxT(t), `DROP TABLE worker_cluster`); err != nil {
		t.Fatal(err)
	}
	_, _, err := tryRegister(t, db, Config{})
	if !errors.Is(err, ErrNoSchema) {
		t.Fatalf("err %v, want ErrNoSchema", err)
	}
	mustContain(t, err, "idctl db migrate")
}

// A database that cannot be reached does not fence the holder: it keeps
// serving up to the mark already written, and Extended stops being called
// so the generator stops there.
func TestIntegration_OutageDoesNotFence(t *testing.T) {
	_, dsn := testDB(t)
	db, err := sql.Open("mysql", dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	l, h := register(t, db, Config{HeartbeatInterval: 20 * time.Millisecond})
	waitFor(t, "a heartbeat", func() bool { _, n, _ := h.counts(); return n > 0 })
	db.Close() // every connection fails from now on
	waitFor(t, "the outage to be noticed", l.DatabaseUnreachable)
	_, ext, _ := h.counts()
	mark := h.durableMark()
	for i := 0; i < 5; i++ {
		l.RequestExtend()
		time.Sleep(30 * time.Millisecond)
	}
	_, ext2, fenced := h.counts()
	if fenced != 0 {
		t.Fatalf("fenced during an outage: %v", h.lastFence())
	}
	if ext2 != ext || h.durableMark() != mark {
		t.Fatalf("Extended called during the outage (%d -> %d calls, mark %d -> %d)", ext, ext2, mark, h.durableMark())
	}
	if l.State() != worker.StateRegistered {
		t.Fatalf("state %v during an outage", l.State())
	}
	if _, ok := l.Slot(); !ok {
		t.Fatal("slot dropped during an outage")
	}
	// Close cannot write the exact mark: it says so, and still fences.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := l.Close(ctx); err == nil {
		t.Fatal("Close with the database gone returned nil")
	}
	if err := h.lastFence(); !errors.Is(err, worker.ErrClosed) {
		t.Fatalf("fence reason %v", err)
	}
}

// A heartbeat whose commit reply was lost (the row already has this
// lease's next gen) is recognised as the lease's own write, not a loss.
func TestIntegration_OwnLostWriteAdopted(t *testing.T) {
	db, _ := testDB(t)
	l, h := register(t, db, Config{HeartbeatInterval: time.Hour})
	s, _ := l.Slot()
	// The lease's write committed, but the lease never heard back.
	if _, err := db.ExecContext(ctxT(t), `UPDATE worker_slot SET gen = gen + 1, high_water_ms = high_water_ms + 1 WHERE cluster = ? AND idc = 0 AND node = ?`, t.Name(), s.Node); err != nil {
		t.Fatal(err)
	}
	l.RequestExtend()
	waitFor(t, "an Extended call", func() bool { _, n, _ := h.counts(); return n > 0 })
	if _, _, f := h.counts(); f != 0 {
		t.Fatalf("fenced on its own write: %v", h.lastFence())
	}
}

func TestValidate(t *testing.T) {
	h := newHolder()
	db := &sql.DB{}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{Holder: h}, "DB"},
		{Config{DB: db}, "Holder"},
		{Config{DB: db, Holder: h, IDC: 4}, "IDC"},
		{Config{DB: db, Holder: h, Meta: worker.Meta{IDCBits: 3, NodeBits: 3}}, "IDCBits"},
		{Config{DB: db, Holder: h, Cluster: "bad\n"}, "Cluster"},
	} {
		err := c.cfg.Validate()
		if !errors.Is(err, worker.ErrInvalidConfig) {
			t.Fatalf("%+v: err %v", c.cfg, err)
		}
		mustContain(t, err, c.want)
	}
	if err := (Config{DB: db, Holder: h}).Validate(); err != nil {
		t.Fatal(err)
	}
	c := Config{}
	if c.Lead() != 33*time.Second || c.TTL() != 35*time.Second {
		t.Fatalf("Lead %v TTL %v", c.Lead(), c.TTL())
	}
	c = Config{HeartbeatInterval: time.Second, OutageTolerance: -1, MaxClockSkew: time.Millisecond}.withDefaults()
	if c.Lead() != time.Second || c.TTL() != time.Second+2*time.Millisecond {
		t.Fatalf("no outage tolerance: Lead %v TTL %v", c.Lead(), c.TTL())
	}
}

func TestCompareMeta(t *testing.T) {
	m := worker.Meta{EpochMs: 1, IDCBits: 2, NodeBits: 8, CreatedMs: 5}
	if err := compareMeta(m, worker.Meta{EpochMs: 1, IDCBits: 2, NodeBits: 8}, "c"); err != nil {
		t.Fatal(err)
	}
	err := compareMeta(m, worker.Meta{EpochMs: 1, IDCBits: 2, NodeBits: 7}, "c")
	mustContain(t, err, "node_bits is 8", "but 7")
}

// The lease really expires in the database's clock: a crashed holder's
// slot becomes free without anyone touching the row, and the taker starts
// above the crashed holder's durable mark.
func TestIntegration_LeaseExpiresByItself(t *testing.T) {
	db, _ := testDB(t)
	cfg := Config{Meta: oneSlot, HeartbeatInterval: 50 * time.Millisecond, OutageTolerance: -1, MaxClockSkew: 100 * time.Millisecond}
	a, ha := register(t, db, cfg)
	waitFor(t, "a heartbeat", func() bool { _, n, _ := ha.counts(); return n > 0 })
	a.crash()
	durable := ha.durableMark()
	cfg.Port = 2
	var b *Lease
	waitFor(t, "the crashed holder's lease to expire", func() bool {
		l, _, err := tryRegister(t, db, cfg)
		if err != nil && !errors.Is(err, ErrIDCFull) {
			t.Fatalf("Register: %v", err)
		}
		b = l
		return err == nil
	})
	s, _ := b.Slot()
	if s.NotBefore < durable {
		t.Fatalf("NotBefore %d below the crashed holder's durable mark %d", s.NotBefore, durable)
	}
}
