package worker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest"

	"github.com/idgen/idgen/cluster"
	"github.com/idgen/idgen/internal/zkproxy"
)

// These tests run against the real ZooKeeper that ./build.sh test starts.
// Each uses its own cluster name so that tests do not see each other.

func testZK(t *testing.T) string {
	t.Helper()
	addr := os.Getenv("IDGEN_TEST_ZK")
	if addr == "" {
		t.Skip("IDGEN_TEST_ZK not set: run ./build.sh test")
	}
	return addr
}

func uniqueCluster(t *testing.T) string {
	name := strings.NewReplacer("/", "-", "_", "-").Replace(t.Name())
	return fmt.Sprintf("%s-%d", name, time.Now().UnixNano())
}

// itConfig is a Config against the real ZooKeeper with short timings. It
// creates the cluster first (as `idctl cluster init`) unless it exists.
func itConfig(t *testing.T, servers, name string, h Holder, port int) Config {
	t.Helper()
	testZK(t)
	c := dialTest(t, servers)
	if _, err := cluster.Init(c, "/idgen-test", name, cluster.Settings{EpochMs: DefaultEpochMs, IDCBits: DefaultIDCBits, NodeBits: DefaultNodeBits},
		zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, cluster.ErrExists) {
		t.Fatalf("cluster init: %v", err)
	}
	cluster := name
	return Config{
		Servers:           []string{servers},
		Root:              "/idgen-test",
		Cluster:           cluster,
		Host:              "127.0.0.1",
		Port:              port,
		PropertiesDir:     t.TempDir(),
		SessionTimeout:    2 * time.Second,
		HeartbeatInterval: 200 * time.Millisecond,
		HighWaterMargin:   200 * time.Millisecond,
		OutageTolerance:   300 * time.Millisecond,
		MaxPeerClockSkew:  100 * time.Millisecond,
		ConnectTimeout:    5 * time.Second,
		Logger:            zaptest.NewLogger(t, zaptest.Level(zap.InfoLevel)),
		Holder:            h,
		Version:           "it",
	}
}

// dialTest opens a plain client for reading back what leases wrote.
func dialTest(t *testing.T, servers string) *zk.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := DialZK(ctx, strings.Split(servers, ","), 10*time.Second, "", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func closeLease(t *testing.T, l Lease) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := l.Close(ctx); err != nil {
		t.Errorf("Close: %v", err)
	}
}

func TestIntegration_ThreeLeasesDistinctSlots(t *testing.T) {
	addr := testZK(t)
	cluster := uniqueCluster(t)
	log := newIssuedLog()
	var leases []*ZKLease
	nodes := map[int]bool{}
	for i := 0; i < 3; i++ {
		l := register(t, itConfig(t, addr, cluster, newTestHolder(fmt.Sprint("n", i), nil, log), 7000+i))
		s, _ := l.Slot()
		if nodes[s.Node] {
			t.Fatalf("node %d given twice", s.Node)
		}
		nodes[s.Node] = true
		leases = append(leases, l)
	}
	c := dialTest(t, addr)
	base := "/idgen-test/" + cluster + "/idc-0"
	slots, _, err := c.Children(base + "/slots")
	if err != nil {
		t.Fatal(err)
	}
	members, _, _ := c.Children(base + "/members")
	if len(slots) != 3 || len(members) != 3 {
		t.Fatalf("slots %v members %v", slots, members)
	}
	for _, s := range slots {
		n, _ := strconv.Atoi(s)
		if !nodes[n] {
			t.Fatalf("slot znode %s not held by a lease", s)
		}
		_, st, err := c.Get(base + "/slots/" + s)
		if err != nil || st.EphemeralOwner == 0 {
			t.Fatalf("slot %s not ephemeral: %v", s, err)
		}
	}
	ws, err := ListWorkers(context.Background(), c, "/idgen-test", cluster, -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 3 {
		t.Fatalf("ListWorkers: %+v", ws)
	}
	for _, w := range ws {
		if !w.SlotHeld || !w.HasHeartbeat || w.AgeByLocalClock || w.HeartbeatAge > 30*time.Second || w.Host != "127.0.0.1" {
			t.Fatalf("worker %+v", w)
		}
	}
	for _, l := range leases {
		if st := l.Status(); !st.ZKConnected || st.State != StateRegistered {
			t.Fatalf("status %+v", st)
		}
	}
}

func TestIntegration_DeadNodeSlotFreesAfterSessionTimeout(t *testing.T) {
	addr := testZK(t)
	cluster := uniqueCluster(t)
	proxy := zkproxy.New(t, addr)
	log := newIssuedLog()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	ha := newTestHolder("a", nil, log)
	cfgA := itConfig(t, proxy.Addr(), cluster, ha, 7000)
	a := register(t, cfgA)
	go ha.issueLoop(ctx)
	sa, _ := a.Slot()
	waitFor(t, "a issuing", 10*time.Second, func() bool { return ha.snap().issued > 20 })

	// The node dies without closing its session: ZooKeeper keeps the claim
	// until the session times out.
	c := dialTest(t, addr)
	slotPath := a.l.slot(0, sa.Node)
	proxy.Block()
	if ok, _, _ := c.Exists(slotPath); !ok {
		t.Fatal("slot freed at once; it must live until the session times out")
	}
	// Cut off, a is not fenced: it keeps serving up to its durable mark
	// and stops there (the ceiling), which is what keeps b's IDs apart.
	waitFor(t, "slot freed by session expiry", 30*time.Second, func() bool {
		ok, _, err := c.Exists(slotPath)
		return err == nil && !ok
	})
	waitFor(t, "a's clock past its mark", 10*time.Second, func() bool { return time.Now().UnixMilli() > a.Status().HighWater+50 })
	aUsed := ha.LastUsed()
	aMark := a.Status().HighWater
	if aUsed > aMark {
		t.Fatalf("a used %d beyond its recorded mark %d", aUsed, aMark)
	}

	// Its replacement (a restart with the same cached slot) takes the slot
	// and waits past the dead node's mark before issuing.
	hb := newTestHolder("b", nil, log)
	cfgB := itConfig(t, addr, cluster, hb, 7000)
	copyFile(t, a.props, filepath.Join(cfgB.PropertiesDir, filepath.Base(a.props)))
	b := register(t, cfgB)
	go hb.issueLoop(ctx)
	sb, _ := b.Slot()
	if sb.Node != sa.Node {
		t.Fatalf("b took node %d, want the freed cached %d", sb.Node, sa.Node)
	}
	if sb.NotBefore < aMark || sb.NotBefore < aUsed {
		t.Fatalf("b NotBefore %d below a's mark %d / last used %d", sb.NotBefore, aMark, aUsed)
	}
	waitFor(t, "b issuing", 10*time.Second, func() bool { return hb.snap().issued > 20 })
	cancel()
	log.check(t)
	hb.checkNoProblems(t)
	ha.checkNoProblems(t)
	closeLease(t, b)
}

func TestIntegration_NextTakerWaitsPastDeadNodesMark(t *testing.T) {
	addr := testZK(t)
	cluster := uniqueCluster(t)
	proxy := zkproxy.New(t, addr)
	// A long look-ahead makes the wait visible: the taker must wait ~3s.
	ha := newTestHolder("a", nil, nil)
	cfgA := itConfig(t, proxy.Addr(), cluster, ha, 7000)
	cfgA.HighWaterMargin = 3 * time.Second
	a := register(t, cfgA)
	sa, _ := a.Slot()
	proxy.Block()
	c := dialTest(t, addr)
	waitFor(t, "slot freed by session expiry", 30*time.Second, func() bool {
		ok, _, err := c.Exists(a.l.slot(0, sa.Node))
		return err == nil && !ok
	})
	b, _, err := c.Get(a.l.last(0, sa.Node))
	if err != nil {
		t.Fatal(err)
	}
	mark, _ := decodeLast(b)
	// Fill every other slot's history as more recent, so LRU picks a's.
	for n := 0; n < 256; n++ {
		if n == sa.Node {
			continue
		}
		_, _ = c.Create(a.l.last(0, n), toJSON(lastData{HighWater: mark.HighWater + 1}), 0, zk.WorldACL(zk.PermAll))
	}
	hb := newTestHolder("b", nil, nil)
	l := register(t, itConfig(t, addr, cluster, hb, 7001))
	sb, _ := l.Slot()
	if sb.Node != sa.Node || sb.NotBefore < mark.HighWater {
		t.Fatalf("b slot %+v, want node %d with NotBefore >= %d", sb, sa.Node, mark.HighWater)
	}
	hb.checkNoProblems(t) // Acquired only after the clock passed the mark
}

func TestIntegration_ForcedSessionExpiry(t *testing.T) {
	addr := testZK(t)
	cluster := uniqueCluster(t)
	proxy := zkproxy.New(t, addr)
	log := newIssuedLog()
	h := newTestHolder("a", nil, log)
	l := register(t, itConfig(t, proxy.Addr(), cluster, h, 7000))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.issueLoop(ctx)
	s0, _ := l.Slot()
	waitFor(t, "issuing", 10*time.Second, func() bool { return h.snap().issued > 20 })

	sid := l.Status().SessionID
	pw := proxy.Password(sid)
	if pw == nil {
		t.Fatalf("no password seen for session %s", sessionHex(sid))
	}
	if err := zkproxy.ExpireSession(addr, sid, pw, 2*time.Second); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "fence", 20*time.Second, func() bool { return len(h.snap().fenced) > 0 })
	waitFor(t, "re-claim", 20*time.Second, func() bool { return len(h.snap().acquired) >= 2 })
	snap := h.snap()
	if !errors.Is(snap.fenced[0], ErrFenced) {
		t.Fatalf("fence reason %v", snap.fenced[0])
	}
	if s1 := snap.acquired[len(snap.acquired)-1]; s1.Node != s0.Node {
		t.Fatalf("re-claimed node %d, want the freed %d", s1.Node, s0.Node)
	}
	st := l.Status()
	if st.SessionID == sid || st.State != StateRegistered {
		t.Fatalf("status after re-claim %+v", st)
	}
	waitFor(t, "issuing again", 10*time.Second, func() bool { return h.snap().issued > snap.issued+20 })
	cancel()
	log.check(t)
	h.checkNoProblems(t)
	c := dialTest(t, addr)
	// Read until ZooKeeper answers: on a loaded machine the shared server
	// may drop a connection; the state asserted is what it holds.
	waitFor(t, "exactly one member after the re-claim", 20*time.Second, func() bool {
		kids, _, err := c.Children(l.l.members(0))
		return err == nil && len(kids) == 1
	})
	closeLease(t, l)
}

func TestIntegration_Race300For256Slots(t *testing.T) {
	addr := testZK(t)
	cluster := uniqueCluster(t)
	dir := t.TempDir()
	const n = 300
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		leases []*ZKLease
		errs   []error
	)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := make(chan struct{})
	// The cluster is created once, here: 300 extra sessions (one per
	// goroutine, as itConfig dials) only load the server the race is on.
	base := itConfig(t, addr, cluster, nil, 0)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg := base
			cfg.Holder, cfg.Port = newTestHolder(fmt.Sprint("n", i), nil, nil), 10000+i
			cfg.PropertiesDir = dir
			cfg.SessionTimeout = 20 * time.Second
			cfg.HeartbeatInterval = 5 * time.Second
			cfg.ConnectTimeout = 60 * time.Second
			cfg.Logger = zap.NewNop()
			<-start
			l, err := Register(ctx, cfg)
			// 300 sessions opening at once on a busy 2-core machine: the
			// server may drop a connection mid-claim. That is a transient
			// failure a caller retries (its session, and so any ephemeral
			// claim, is gone), not the refusal this test is about.
			for try := 0; try < 3 && err != nil && errors.Is(err, zk.ErrConnectionClosed); try++ {
				l, err = Register(ctx, cfg)
			}
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
				return
			}
			leases = append(leases, l)
		}()
	}
	close(start)
	wg.Wait()
	defer func() {
		var cw sync.WaitGroup
		for _, l := range leases {
			cw.Add(1)
			go func() {
				defer cw.Done()
				_ = l.Close(context.Background())
			}()
		}
		cw.Wait()
	}()
	if len(leases) != 256 || len(errs) != n-256 {
		t.Fatalf("%d leases and %d errors, want 256 and %d; first error: %v", len(leases), len(errs), n-256, errors.Join(errs...))
	}
	for _, err := range errs {
		if !errors.Is(err, ErrNoFreeSlot) || !strings.Contains(err.Error(), "all 256 slots") {
			t.Fatalf("refusal %v, want ErrNoFreeSlot", err)
		}
	}
	seen := map[int]bool{}
	for _, l := range leases {
		s, _ := l.Slot()
		if seen[s.Node] {
			t.Fatalf("node %d held twice", s.Node)
		}
		seen[s.Node] = true
	}
	c := dialTest(t, addr)
	slots, _, _ := c.Children("/idgen-test/" + cluster + "/idc-0/slots")
	members, _, _ := c.Children("/idgen-test/" + cluster + "/idc-0/members")
	if len(slots) != 256 || len(members) != 256 {
		t.Fatalf("%d slot znodes and %d members, want 256 each", len(slots), len(members))
	}
}

func TestIntegration_RestartReusesCachedSlot(t *testing.T) {
	addr := testZK(t)
	cluster := uniqueCluster(t)
	// Two other nodes first, so that the cached slot is not simply the
	// next free one.
	for i := 0; i < 2; i++ {
		register(t, itConfig(t, addr, cluster, newTestHolder("x", nil, nil), 7100+i))
	}
	cfg := itConfig(t, addr, cluster, newTestHolder("a", nil, nil), 7000)
	a := register(t, cfg)
	sa, _ := a.Slot()
	closeLease(t, a)

	cfg.Holder = newTestHolder("a2", nil, nil)
	a2 := register(t, cfg)
	if s, _ := a2.Slot(); s.Node != sa.Node {
		t.Fatalf("restart took node %d, want cached %d", s.Node, sa.Node)
	}

	// Another node with the same cached slot while a2 is alive: not used.
	cfgB := itConfig(t, addr, cluster, newTestHolder("b", nil, nil), 7000)
	copyFile(t, a2.props, filepath.Join(cfgB.PropertiesDir, filepath.Base(a2.props)))
	b := register(t, cfgB)
	if s, _ := b.Slot(); s.Node == sa.Node {
		t.Fatalf("b took node %d held by a live lease", s.Node)
	}
}

func TestIntegration_MetaMismatch(t *testing.T) {
	addr := testZK(t)
	cluster := uniqueCluster(t)
	register(t, itConfig(t, addr, cluster, newTestHolder("a", nil, nil), 7000))
	cfg := itConfig(t, addr, cluster, newTestHolder("b", nil, nil), 7001)
	cfg.Meta = Meta{IDCBits: 4, NodeBits: 6}
	_, err := Register(context.Background(), cfg)
	if !errors.Is(err, ErrMetaMismatch) || !strings.Contains(err.Error(), "idc_bits is 2 in ZooKeeper but 4") {
		t.Fatalf("err = %v", err)
	}
}

func TestIntegration_DegradedStartThenZooKeeperReturns(t *testing.T) {
	addr := testZK(t)
	cluster := uniqueCluster(t)
	proxy := zkproxy.New(t, addr)
	cfg := itConfig(t, proxy.Addr(), cluster, newTestHolder("a", nil, nil), 7000)
	cfg.SessionTimeout = 4 * time.Second // room for the degraded window
	a := register(t, cfg)
	sa, _ := a.Slot()
	// a crashes: no clean shutdown (its properties file keeps a look-ahead
	// mark and the time ZooKeeper last confirmed it); its session is gone.
	a.cancel()
	<-a.done
	a.sess.Close() // the lease's own session: its client

	proxy.Block()
	h := newTestHolder("b", nil, nil)
	cfg.Holder = h
	cfg.ConnectTimeout = time.Second
	cfg.AllowCachedSlotWithoutZK = Bool(true)
	l := register(t, cfg)
	if l.State() != StateDegraded {
		t.Fatalf("state %s, want degraded", l.State())
	}
	proxy.Unblock()
	waitFor(t, "registered", 30*time.Second, func() bool { return l.State() == StateRegistered })
	if snap := h.snap(); len(snap.fenced) != 0 {
		t.Fatalf("fenced on ZooKeeper's return: %v", snap.fenced)
	}
	if s, _ := l.Slot(); s.Node != sa.Node {
		t.Fatalf("node %d, want cached %d", s.Node, sa.Node)
	}
	c := dialTest(t, addr)
	waitFor(t, "the slot claim held by the lease's session", 20*time.Second, func() bool {
		_, st, err := c.Get(l.l.slot(0, sa.Node))
		return err == nil && st.EphemeralOwner == l.Status().SessionID && l.State() == StateRegistered
	})
}

func TestIntegration_DigestACL(t *testing.T) {
	addr := testZK(t)
	cluster := uniqueCluster(t)
	cfg := itConfig(t, addr, cluster, newTestHolder("a", nil, nil), 7000)
	cfg.Auth = "idgen:s3cret"
	register(t, cfg)

	anon := dialTest(t, addr)
	if _, err := ListWorkers(context.Background(), anon, "/idgen-test", cluster, -1); !errors.Is(err, zk.ErrNoAuth) {
		t.Fatalf("anonymous listing: err = %v, want zk.ErrNoAuth", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	authed, err := DialZK(ctx, []string{addr}, 5*time.Second, "idgen:s3cret", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer authed.Close()
	ws, err := ListWorkers(context.Background(), authed, "/idgen-test", cluster, -1)
	if err != nil || len(ws) != 1 {
		t.Fatalf("authenticated listing: %v %+v", err, ws)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}
