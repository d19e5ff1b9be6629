package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap/zaptest"

	"github.com/idgen/idgen/clock"
	"github.com/idgen/idgen/clock/clocktest"
	"github.com/idgen/idgen/cluster"
)

// fakeConfig is a Config against f with short, test-friendly timings. It
// creates the cluster on f first (as `idctl cluster init`) if f is up.
func fakeConfig(t *testing.T, f *fakeZK, h Holder, port int) Config {
	t.Helper()
	if !f.down.Load() {
		initFake(t, f)
	}
	return Config{
		Servers:           []string{"fake:2181"},
		Root:              "/t",
		Cluster:           "c1",
		Host:              "10.0.0.1",
		Port:              port,
		PropertiesDir:     t.TempDir(),
		SessionTimeout:    2 * time.Second,
		OutageTolerance:   50 * time.Millisecond,
		HeartbeatInterval: 20 * time.Millisecond,
		HighWaterMargin:   30 * time.Millisecond,
		ConnectTimeout:    200 * time.Millisecond,
		Connect:           f.connect,
		ServerStats:       f.serverStats,
		Logger:            zaptest.NewLogger(t),
		Holder:            h,
		Version:           "test",
	}
}

// initFake creates cluster c1 under /t on f (as `idctl cluster init`)
// unless it exists, with the default settings.
func initFake(t *testing.T, f *fakeZK) {
	t.Helper()
	initFakeWith(t, f, Meta{}.withDefaults())
}

func initFakeWith(t *testing.T, f *fakeZK, m Meta) {
	t.Helper()
	c, _, _ := f.connect(nil, time.Second)
	defer c.Close()
	_, err := cluster.Init(c, "/t", "c1", cluster.Settings{EpochMs: m.EpochMs, IDCBits: m.IDCBits, NodeBits: m.NodeBits}, zk.WorldACL(zk.PermAll))
	if err != nil && !errors.Is(err, cluster.ErrExists) {
		t.Fatalf("cluster init: %v", err)
	}
}

func register(t *testing.T, cfg Config) *ZKLease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := Register(ctx, cfg)
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

func connOf(l *ZKLease) *fakeConn { return l.sess.Client().(*fakeConn) }

func TestConfigValidateNamesField(t *testing.T) {
	h := newTestHolder("h", nil, nil)
	ok := Config{Servers: []string{"zk:2181"}, Holder: h}
	if err := ok.Validate(); err != nil {
		t.Fatalf("minimal config: %v", err)
	}
	tests := []struct {
		field string
		mod   func(*Config)
	}{
		{"Servers", func(c *Config) { c.Servers = nil }},
		{"Root", func(c *Config) { c.Root = "idgen" }},
		{"Cluster", func(c *Config) { c.Cluster = "a/b" }},
		{"IDC", func(c *Config) { c.IDC = 4 }},
		{"Meta.IDCBits", func(c *Config) { c.Meta = Meta{IDCBits: 3, NodeBits: 8} }},
		{"HeartbeatInterval", func(c *Config) { c.HeartbeatInterval = 11 * time.Second }},
		{"Port", func(c *Config) { c.Port = 70000 }},
		{"Holder", func(c *Config) { c.Holder = nil }},
		{"Auth", func(c *Config) { c.Auth = "secret-without-colon" }},
	}
	for _, tt := range tests {
		t.Run(tt.field, func(t *testing.T) {
			c := ok
			tt.mod(&c)
			err := c.Validate()
			if !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("err = %v, want ErrInvalidConfig", err)
			}
			if !strings.Contains(err.Error(), tt.field) {
				t.Fatalf("err %q does not name %s", err, tt.field)
			}
		})
	}
	c := ok
	c.Auth = "secret-without-colon"
	if err := c.Validate(); strings.Contains(err.Error(), "secret") {
		t.Fatalf("Validate leaks the credential: %v", err)
	}
}

func TestPropertiesRoundTripAtomic(t *testing.T) {
	dir := t.TempDir()
	p := propertiesPath(dir, "idgen", 8888, "10.1.2.3")
	if filepath.Base(p) != "idgen:8888:10.1.2.3.properties" {
		t.Fatalf("file name %q", filepath.Base(p))
	}
	if _, err := readProperties(p); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: err = %v, want ErrNotExist", err)
	}
	want := properties{Cluster: "c1", IDC: 1, Node: 37, WorkerID: 1<<8 | 37, HighWater: 1700000000123, Exact: true,
		Meta:  Meta{EpochMs: DefaultEpochMs, IDCBits: 2, NodeBits: 8, CreatedMs: 1690000000000},
		Marks: map[[2]int]int64{{1, 3}: 1700000000000, {0, 9}: 1600000000000}}
	for i := 0; i < 3; i++ {
		want.HighWater += int64(i)
		if err := writeProperties(p, want); err != nil {
			t.Fatal(err)
		}
		got, err := readProperties(p)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("round trip: got %+v, want %+v", got, want)
		}
	}
	b, _ := os.ReadFile(p)
	for _, key := range []string{"workerId=293", "idc=1", "node=37", "highWater=", "cluster=c1"} {
		if !strings.Contains(string(b), key) {
			t.Errorf("file lacks %q:\n%s", key, b)
		}
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temp files left behind: %v", entries)
	}
	if err := os.WriteFile(p, []byte("cluster=c1\nidc=x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readProperties(p); err == nil || !strings.Contains(err.Error(), "idc") {
		t.Fatalf("corrupt file: err = %v, want one naming idc", err)
	}
}

func TestRegisterThreeDistinctSlots(t *testing.T) {
	f := newFakeZK()
	log := newIssuedLog()
	seen := map[int]bool{}
	var leases []*ZKLease
	for i := 0; i < 3; i++ {
		h := newTestHolder(fmt.Sprint("n", i), nil, log)
		l := register(t, fakeConfig(t, f, h, 9000+i))
		s, ok := l.Slot()
		if !ok || l.State() != StateRegistered {
			t.Fatalf("lease %d: state %s", i, l.State())
		}
		if seen[s.Node] {
			t.Fatalf("slot %d given twice", s.Node)
		}
		seen[s.Node] = true
		if got := h.snap().acquired; len(got) != 1 || got[0] != s {
			t.Fatalf("holder got %v, lease says %v", got, s)
		}
		leases = append(leases, l)
	}
	c, _, _ := f.connect(nil, 0)
	slots, _, _ := c.Children("/t/c1/idc-0/slots")
	members, _, _ := c.Children("/t/c1/idc-0/members")
	if len(slots) != 3 || len(members) != 3 {
		t.Fatalf("slots %v members %v, want 3 each", slots, members)
	}
	b, _, err := c.Get(leases[0].Member())
	if err != nil {
		t.Fatal(err)
	}
	var md memberData
	if err := json.Unmarshal(b, &md); err != nil {
		t.Fatal(err)
	}
	s0, _ := leases[0].Slot()
	if md.Host != "10.0.0.1" || md.Port != 9000 || md.Slot != s0.Node || md.PID != os.Getpid() || md.Version != "test" {
		t.Fatalf("member data %+v", md)
	}
	b, _, _ = c.Get("/t/c1/meta")
	var meta cluster.Record
	if err := json.Unmarshal(b, &meta); err != nil || meta.IDCBits != 2 || meta.NodeBits != 8 || meta.EpochMs != DefaultEpochMs || meta.CreatedMs == 0 || !meta.Init {
		t.Fatalf("meta %s (%v)", b, err)
	}
}

func TestMetaMismatchRefusesNamingSetting(t *testing.T) {
	f := newFakeZK()
	register(t, fakeConfig(t, f, newTestHolder("a", nil, nil), 9000))
	tests := []struct {
		meta    Meta
		setting string
	}{
		{Meta{IDCBits: 3, NodeBits: 7}, "idc_bits is 2 in ZooKeeper but 3"},
		{Meta{EpochMs: DefaultEpochMs + 1}, "epoch_ms"},
	}
	for _, tt := range tests {
		cfg := fakeConfig(t, f, newTestHolder("b", nil, nil), 9001)
		cfg.Meta = tt.meta
		_, err := Register(context.Background(), cfg)
		if !errors.Is(err, ErrMetaMismatch) || !strings.Contains(err.Error(), tt.setting) {
			t.Fatalf("err = %v, want ErrMetaMismatch naming %q", err, tt.setting)
		}
	}
}

func TestHeartbeatExtendsAndRecordsMark(t *testing.T) {
	f := newFakeZK()
	h := newTestHolder("a", nil, nil)
	cfg := fakeConfig(t, f, h, 9000)
	l := register(t, cfg)
	waitFor(t, "three heartbeats", 5*time.Second, func() bool { return len(h.snap().extended) >= 3 })
	s, _ := l.Slot()
	ext := h.snap().extended
	for i := 1; i < len(ext); i++ {
		if ext[i] < ext[i-1] {
			t.Fatalf("high-water mark went down: %v", ext)
		}
	}
	b, _, ok := f.get(l.l.last(0, s.Node))
	d, err := decodeLast(b)
	if !ok || err != nil || d.HighWater < ext[0] || d.Exact {
		t.Fatalf("last znode %s (%v)", b, err)
	}
	p, err := readProperties(l.props)
	if err != nil || p.Node != s.Node || p.HighWater < ext[0] || p.Cluster != "c1" || p.Meta.CreatedMs == 0 {
		t.Fatalf("properties %+v (%v)", p, err)
	}
	st := l.Status()
	if !st.ZKConnected || !st.ClockOffsetKnown || st.HighWater < ext[0] || st.State != StateRegistered {
		t.Fatalf("status %+v", st)
	}
}

func TestCloseWritesExactMarkAndReleases(t *testing.T) {
	f := newFakeZK()
	h := newTestHolder("a", nil, nil)
	l := register(t, fakeConfig(t, f, h, 9000))
	s, _ := l.Slot()
	waitFor(t, "an issued ID", 5*time.Second, h.issue)
	used := h.LastUsed()
	member := l.Member()
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, _, _ := f.get(l.l.last(0, s.Node))
	d, _ := decodeLast(b)
	if want := max(used, s.NotBefore); d.HighWater != want || !d.Exact {
		t.Fatalf("exact mark %+v, want %d", d, want)
	}
	if _, _, ok := f.get(l.l.slot(0, s.Node)); ok {
		t.Fatal("slot claim left after Close")
	}
	if _, _, ok := f.get(member); ok {
		t.Fatal("member left after Close")
	}
	if p, _ := readProperties(l.props); p.HighWater != d.HighWater {
		t.Fatalf("properties mark %d, want %d", p.HighWater, d.HighWater)
	}
	if snap := h.snap(); snap.active || len(snap.fenced) != 1 || !errors.Is(snap.fenced[0], ErrClosed) {
		t.Fatalf("holder after Close: %+v", snap)
	}
	if l.State() != StateNone {
		t.Fatalf("state %s after Close", l.State())
	}
}

// TestConnectionLossServesUpToTheMark: a disconnected holder is not fenced;
// it keeps serving up to its durable mark and no further (the ceiling),
// and after reconnection heartbeats extend it again without a new slot.
func TestConnectionLossServesUpToTheMark(t *testing.T) {
	f := newFakeZK()
	h := newTestHolder("a", nil, nil)
	l := register(t, fakeConfig(t, f, h, 9000))
	c := connOf(l)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.issueLoop(ctx)
	c.Disconnect()
	hw := l.Status().HighWater
	waitFor(t, "the clock to pass the mark", 5*time.Second, func() bool { return time.Now().UnixMilli() > hw+20 })
	snap := h.snap()
	if len(snap.fenced) != 0 || !snap.active {
		t.Fatalf("connection loss fenced the holder: %+v", snap)
	}
	if snap.lastUsed > snap.hw {
		t.Fatalf("issued %d past the durable mark %d", snap.lastUsed, snap.hw)
	}
	c.Reconnect()
	n := len(h.snap().extended)
	waitFor(t, "heartbeats after reconnection", 5*time.Second, func() bool { return len(h.snap().extended) >= n+2 })
	if snap := h.snap(); len(snap.acquired) != 1 || len(snap.fenced) != 0 {
		t.Fatalf("reconnection re-acquired or fenced: %+v", snap)
	}
	h.checkNoProblems(t)
}

func TestShortDisconnectDoesNotFence(t *testing.T) {
	f := newFakeZK()
	h := newTestHolder("a", nil, nil)
	cfg := fakeConfig(t, f, h, 9000)
	l := register(t, cfg)
	c := connOf(l)
	c.Disconnect()
	time.Sleep(20 * time.Millisecond)
	c.Reconnect()
	n := len(h.snap().extended)
	waitFor(t, "heartbeats after the blip", 5*time.Second, func() bool { return len(h.snap().extended) >= n+2 })
	if snap := h.snap(); len(snap.fenced) != 0 || len(snap.acquired) != 1 {
		t.Fatalf("blip shorter than FenceAfter fenced: %+v", snap)
	}
}

func TestSessionExpiryFencesAndReclaims(t *testing.T) {
	f := newFakeZK()
	log := newIssuedLog()
	h := newTestHolder("a", nil, log)
	l := register(t, fakeConfig(t, f, h, 9000))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.issueLoop(ctx)
	s0, _ := l.Slot()
	oldMember := l.Member()
	waitFor(t, "some IDs", 5*time.Second, func() bool { return h.snap().issued > 5 })

	connOf(l).Renew(false)
	waitFor(t, "re-claim", 5*time.Second, func() bool { return len(h.snap().acquired) == 2 })
	snap := h.snap()
	if len(snap.fenced) != 1 || !errors.Is(snap.fenced[0], ErrSessionExpired) {
		t.Fatalf("fenced %v, want one ErrSessionExpired", snap.fenced)
	}
	s1 := snap.acquired[1]
	if s1.Node != s0.Node {
		t.Fatalf("re-claimed node %d, want the free old one %d", s1.Node, s0.Node)
	}
	if l.Member() == oldMember || l.Member() == "" {
		t.Fatalf("member not re-created: %q", l.Member())
	}
	waitFor(t, "IDs after the re-claim", 5*time.Second, func() bool { return h.snap().issued > snap.issued+5 })
	cancel()
	log.check(t)
	h.checkNoProblems(t)
}

func TestExpiryWithSlotTakenClaimsAnother(t *testing.T) {
	f := newFakeZK()
	h := newTestHolder("a", nil, nil)
	l := register(t, fakeConfig(t, f, h, 9000))
	s0, _ := l.Slot()
	c := connOf(l)
	// The session ends on the server and another node takes the slot
	// before this client reconnects.
	c.Disconnect()
	f.DropEphemerals(c.SessionID())
	other, _, _ := f.connect(nil, 0)
	if _, err := other.Create(l.l.slot(0, s0.Node), nil, zk.FlagEphemeral, nil); err != nil {
		t.Fatal(err)
	}
	c.Renew(false)
	waitFor(t, "re-claim", 5*time.Second, func() bool { return len(h.snap().acquired) == 2 })
	if s1 := h.snap().acquired[1]; s1.Node == s0.Node {
		t.Fatalf("took node %d held by another session", s1.Node)
	}
}

func TestLeastRecentlyUsedSlotFirst(t *testing.T) {
	f := newFakeZK()
	c, _, _ := f.connect(nil, 0)
	now := time.Now().UnixMilli()
	for _, p := range []string{"/t", "/t/c1", "/t/c1/idc-0", "/t/c1/idc-0/last"} {
		_, _ = c.Create(p, nil, 0, nil)
	}
	// Every slot has been used; node 7 longest ago.
	for n := 0; n < 256; n++ {
		hw := now - 1000 + int64(n)
		if n == 7 {
			hw = now - 100000
		}
		if _, err := c.Create(fmt.Sprintf("/t/c1/idc-0/last/%d", n), toJSON(lastData{HighWater: hw}), 0, nil); err != nil {
			t.Fatal(err)
		}
	}
	h := newTestHolder("a", nil, nil)
	l := register(t, fakeConfig(t, f, h, 9000))
	if s, _ := l.Slot(); s.Node != 7 {
		t.Fatalf("took node %d, want least recently used 7", s.Node)
	}
	h2 := newTestHolder("b", nil, nil)
	l2 := register(t, fakeConfig(t, f, h2, 9001))
	if s, _ := l2.Slot(); s.Node != 0 {
		t.Fatalf("second took node %d, want next least recently used 0", s.Node)
	}
}

// ageCluster creates the cluster's meta on f and moves clk past the time
// when slots without a mark must wait (a cluster older than its lead).
func ageCluster(t *testing.T, f *fakeZK, clk *clocktest.Fake) {
	t.Helper()
	cfg := fakeConfig(t, f, newTestHolder("old", clk, nil), 8999)
	cfg.Clock = clk
	l := register(t, cfg)
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	clk.Add(5 * time.Second)
}

// TestCleanRestartResumesCachedSlot: a clean shutdown's exact mark lets the
// restart take its own slot again at once.
func TestCleanRestartResumesCachedSlot(t *testing.T) {
	f := newFakeZK()
	clk := clocktest.New(time.Now())
	f.SetNow(clk.Now)
	h := newTestHolder("a", clk, nil)
	cfg := fakeConfig(t, f, h, 9000)
	cfg.Clock = clk
	ageCluster(t, f, clk)
	exact := clock.Millis(clk) - 10
	if err := writeProperties(propertiesPath(cfg.PropertiesDir, "idgen", 9000, "10.0.0.1"),
		properties{Cluster: "c1", IDC: 0, Node: 42, WorkerID: 42, HighWater: exact, Exact: true}); err != nil {
		t.Fatal(err)
	}
	l := register(t, cfg)
	if s, _ := l.Slot(); s.Node != 42 || s.NotBefore != exact {
		t.Fatalf("slot %+v, want node 42 NotBefore %d", s, exact)
	}
	h.checkNoProblems(t)
}

// TestCrashRestartTakesAPassedSlot (issue 10): after a crash the cached
// mark is a look-ahead still in the future; the restart takes another slot
// whose mark has passed and serves at once, instead of waiting.
func TestCrashRestartTakesAPassedSlot(t *testing.T) {
	f := newFakeZK()
	clk := clocktest.New(time.Now())
	f.SetNow(clk.Now)
	h := newTestHolder("a", clk, nil)
	cfg := fakeConfig(t, f, h, 9000)
	cfg.Clock = clk
	ageCluster(t, f, clk)
	cachedHW := clock.Millis(clk) + 30_000
	if err := writeProperties(propertiesPath(cfg.PropertiesDir, "idgen", 9000, "10.0.0.1"),
		properties{Cluster: "c1", IDC: 0, Node: 42, WorkerID: 42, HighWater: cachedHW}); err != nil {
		t.Fatal(err)
	}
	l := register(t, cfg)
	s, _ := l.Slot()
	if s.Node == 42 || s.NotBefore >= clock.Millis(clk) {
		t.Fatalf("slot %+v, want another node whose mark has passed", s)
	}
	h.checkNoProblems(t)
}

// TestCacheFoundAfterAddressChange (issue 9 item 5): the properties file
// was written under another host address; the restart still finds the
// cached slot and its mark.
func TestCacheFoundAfterAddressChange(t *testing.T) {
	f := newFakeZK()
	clk := clocktest.New(time.Now())
	f.SetNow(clk.Now)
	h := newTestHolder("a", clk, nil)
	cfg := fakeConfig(t, f, h, 9000)
	cfg.Clock = clk
	ageCluster(t, f, clk)
	exact := clock.Millis(clk) - 10
	if err := writeProperties(propertiesPath(cfg.PropertiesDir, "idgen", 9000, "10.9.9.9"),
		properties{Cluster: "c1", IDC: 0, Node: 42, WorkerID: 42, HighWater: exact, Exact: true}); err != nil {
		t.Fatal(err)
	}
	l := register(t, cfg)
	if s, _ := l.Slot(); s.Node != 42 || s.NotBefore != exact {
		t.Fatalf("slot %+v, want the cached node 42 with NotBefore %d", s, exact)
	}
}

func TestCachedSlotHeldByAnotherIsNotUsed(t *testing.T) {
	f := newFakeZK()
	a := register(t, fakeConfig(t, f, newTestHolder("a", nil, nil), 9000))
	sa, _ := a.Slot()
	cfg := fakeConfig(t, f, newTestHolder("b", nil, nil), 9001)
	if err := writeProperties(propertiesPath(cfg.PropertiesDir, "idgen", 9001, "10.0.0.1"),
		properties{Cluster: "c1", IDC: 0, Node: sa.Node, WorkerID: sa.Worker, HighWater: 1}); err != nil {
		t.Fatal(err)
	}
	b := register(t, cfg)
	if sb, _ := b.Slot(); sb.Node == sa.Node {
		t.Fatalf("cached node %d taken while another lease holds it", sb.Node)
	}
}

func TestStartWaitTooLongRefusesWithFigures(t *testing.T) {
	f := newFakeZK()
	c, _, _ := f.connect(nil, 0)
	for _, p := range []string{"/t", "/t/c1", "/t/c1/idc-0", "/t/c1/idc-0/last"} {
		_, _ = c.Create(p, nil, 0, nil)
	}
	far := time.Now().Add(time.Hour).UnixMilli()
	for n := 0; n < 256; n++ {
		_, _ = c.Create(fmt.Sprintf("/t/c1/idc-0/last/%d", n), toJSON(lastData{HighWater: far}), 0, nil)
	}
	cfg := fakeConfig(t, f, newTestHolder("a", nil, nil), 9000)
	_, err := Register(context.Background(), cfg)
	if !errors.Is(err, ErrStartWaitTooLong) || !strings.Contains(err.Error(), fmt.Sprint(far)) || !strings.Contains(err.Error(), "MaxStartWait 50s") {
		t.Fatalf("err = %v, want ErrStartWaitTooLong with the figures", err)
	}
	if kids, _, _ := c.Children("/t/c1/idc-0/slots"); len(kids) != 0 {
		t.Fatalf("refused start left claims %v", kids)
	}
}

func TestNoFreeSlot(t *testing.T) {
	f := newFakeZK()
	c, _, _ := f.connect(nil, 0)
	for _, p := range []string{"/t", "/t/c1", "/t/c1/idc-0", "/t/c1/idc-0/slots"} {
		_, _ = c.Create(p, nil, 0, nil)
	}
	for n := 0; n < 256; n++ {
		_, _ = c.Create(fmt.Sprintf("/t/c1/idc-0/slots/%d", n), nil, zk.FlagEphemeral, nil)
	}
	_, err := Register(context.Background(), fakeConfig(t, f, newTestHolder("a", nil, nil), 9000))
	if !errors.Is(err, ErrNoFreeSlot) || !strings.Contains(err.Error(), "all 256 slots of idc 0") {
		t.Fatalf("err = %v, want ErrNoFreeSlot", err)
	}
}

func TestLostCreateResponsesAreRecovered(t *testing.T) {
	f := newFakeZK()
	c, _, _ := f.connect(nil, 0)
	for _, p := range []string{"/m", "/s"} {
		_, _ = c.Create(p, nil, 0, nil)
	}
	f.LoseNextCreate("/m/")
	p, err := createMember(context.Background(), c, "/m", []byte("{}"), nil)
	if err != nil {
		t.Fatal(err)
	}
	if kids, _, _ := c.Children("/m"); len(kids) != 1 || "/m/"+kids[0] != p {
		t.Fatalf("members %v, path %q: want exactly the one created", kids, p)
	}
	if !strings.HasPrefix(p, "/m/m-") {
		t.Fatalf("member name %q", p)
	}

	f.LoseNextCreate("/s/")
	cl := claimer{zk: c, l: layout{"/x", "y"}, data: func() []byte { return nil }}
	cl.l = layout{root: "/", cluster: "s"} // slots path is /s/idc-0/slots/<n>
	for _, p := range []string{"/s/idc-0", "/s/idc-0/slots"} {
		_, _ = c.Create(p, nil, 0, nil)
	}
	ok, _, err := cl.tryClaim(context.Background(), 3)
	if err != nil || !ok {
		t.Fatalf("claim after lost response: ok=%v err=%v", ok, err)
	}
}

func TestPeerClockCheck(t *testing.T) {
	f := newFakeZK()
	register(t, fakeConfig(t, f, newTestHolder("a", nil, nil), 9000))
	cfgB := fakeConfig(t, f, newTestHolder("b", nil, nil), 9001)
	cfgB.Host = "10.0.0.2"
	register(t, cfgB)

	// Peers 5s ahead: refuse, naming the figures.
	cfg := fakeConfig(t, f, newTestHolder("c", nil, nil), 9002)
	var mu sync.Mutex
	asked := map[string]bool{}
	cfg.PeerClock = func(ctx context.Context, host string, port int) (int64, error) {
		mu.Lock()
		defer mu.Unlock()
		asked[fmt.Sprintf("%s:%d", host, port)] = true
		return time.Now().Add(5 * time.Second).UnixMilli(), nil
	}
	_, err := Register(context.Background(), cfg)
	if !errors.Is(err, ErrClockSkew) || !strings.Contains(err.Error(), "behind the median of 2 peers") {
		t.Fatalf("err = %v, want ErrClockSkew", err)
	}
	if !asked["10.0.0.1:9000"] || !asked["10.0.0.2:9001"] {
		t.Fatalf("asked %v", asked)
	}

	// One peer dead, one slow, none answers: skipped, start goes on.
	cfg = fakeConfig(t, f, newTestHolder("d", nil, nil), 9003)
	cfg.PeerClockTimeout = 20 * time.Millisecond
	cfg.PeerClock = func(ctx context.Context, host string, port int) (int64, error) {
		if port == 9000 {
			return 0, errors.New("connection refused")
		}
		<-ctx.Done()
		return 0, ctx.Err()
	}
	register(t, cfg)

	// Close clocks: passes.
	cfg = fakeConfig(t, f, newTestHolder("e", nil, nil), 9004)
	cfg.PeerClock = func(ctx context.Context, host string, port int) (int64, error) {
		return time.Now().Add(100 * time.Millisecond).UnixMilli(), nil
	}
	register(t, cfg)
}

// crashCache writes the properties file a crashed run leaves behind: slot
// node with a look-ahead mark hw, last confirmed by ZooKeeper at contact.
func crashCache(t *testing.T, dir string, port, node int, hw, contact int64) {
	t.Helper()
	if err := writeProperties(propertiesPath(dir, "idgen", port, "10.0.0.1"), properties{
		Cluster: "c1", IDC: 0, Node: node, WorkerID: node, HighWater: hw, ZKContactMs: contact,
		Meta: Meta{EpochMs: DefaultEpochMs, IDCBits: 2, NodeBits: 8, CreatedMs: 1},
	}); err != nil {
		t.Fatal(err)
	}
}

func TestDegradedStartThenZooKeeperReturns(t *testing.T) {
	f := newFakeZK()
	initFake(t, f)
	dir := t.TempDir()
	now := time.Now().UnixMilli()
	crashCache(t, dir, 9000, 5, now+50, now)

	f.setDown()
	h := newTestHolder("b", nil, nil)
	cfg := fakeConfig(t, f, h, 9000)
	cfg.PropertiesDir = dir
	cfg.AllowCachedSlotWithoutZK = Bool(true)
	l := register(t, cfg)
	if l.State() != StateDegraded {
		t.Fatalf("state %s, want degraded", l.State())
	}
	s, _ := l.Slot()
	if s.Node != 5 || s.NotBefore != now+50 {
		t.Fatalf("degraded slot %+v, want cached node 5 above %d", s, now+50)
	}
	// The old claim lives at least a session timeout after the contact;
	// the degraded marks stop before it, less the margin and the skew.
	deadline := now + (cfg.SessionTimeout - cfg.HighWaterMargin - DefaultMaxPeerClockSkew).Milliseconds()
	if s.HighWater > deadline {
		t.Fatalf("degraded mark %d past the old claim's earliest expiry %d", s.HighWater, deadline)
	}
	if st := l.Status(); st.ZKConnected {
		t.Fatal("ZKConnected while ZooKeeper is down")
	}
	n := len(h.snap().extended)
	waitFor(t, "degraded heartbeats", 5*time.Second, func() bool { return len(h.snap().extended) >= n+2 })
	waitFor(t, "past the deadline", 5*time.Second, func() bool { return time.Now().UnixMilli() > deadline+100 })
	for _, hw := range h.snap().extended {
		if hw > deadline {
			t.Fatalf("degraded heartbeat extended to %d, past %d", hw, deadline)
		}
	}

	f.up()
	waitFor(t, "registered", 5*time.Second, func() bool { return l.State() == StateRegistered })
	if snap := h.snap(); len(snap.fenced) != 0 || len(snap.acquired) != 1 {
		t.Fatalf("ZooKeeper's return interrupted the holder: %+v", snap)
	}
	if _, st, ok := f.get(l.l.slot(0, 5)); !ok || st.EphemeralOwner != connOf(l).SessionID() {
		t.Fatal("cached slot not claimed in ZooKeeper")
	}
	if l.Member() == "" {
		t.Fatal("no member znode after ZooKeeper returned")
	}
	waitFor(t, "extended past the degraded deadline", 5*time.Second, func() bool {
		ext := h.snap().extended
		return len(ext) > 0 && ext[len(ext)-1] > deadline
	})
}

// TestDegradedStartRefusedUnlessProvablySafe (issue 17 item 3): a cached
// slot is used without ZooKeeper only while the last run's claim still
// holds it and above its mark; otherwise the start is refused, naming why.
func TestDegradedStartRefusedUnlessProvablySafe(t *testing.T) {
	now := time.Now().UnixMilli()
	for _, tc := range []struct {
		name    string
		allow   *bool
		tol     time.Duration
		exact   bool
		hw      int64
		contact int64
		want    string
	}{
		{"default is off", nil, 0, false, now, now, "AllowCachedSlotWithoutZK is off"},
		{"clean shutdown released the slot", Bool(true), 0, true, now, now, "released by a clean shutdown"},
		{"older idgen: no contact time", Bool(true), 0, false, now, 0, "does not say when ZooKeeper last confirmed"},
		{"claim may have expired", Bool(true), 0, false, now - 5000, now - 3000, "not safe to use"},
		{"default lead: mark past the claim's expiry", Bool(true), 30 * time.Second, false, now + 35_000, now, "not safe to use"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeZK()
			dir := t.TempDir()
			if err := writeProperties(propertiesPath(dir, "idgen", 9000, "10.0.0.1"), properties{
				Cluster: "c1", IDC: 0, Node: 5, WorkerID: 5, HighWater: tc.hw, Exact: tc.exact, ZKContactMs: tc.contact,
				Meta: Meta{EpochMs: DefaultEpochMs, IDCBits: 2, NodeBits: 8, CreatedMs: 1},
			}); err != nil {
				t.Fatal(err)
			}
			f.setDown()
			cfg := fakeConfig(t, f, newTestHolder("a", nil, nil), 9000)
			cfg.PropertiesDir = dir
			cfg.AllowCachedSlotWithoutZK = tc.allow
			if tc.tol != 0 {
				cfg.OutageTolerance, cfg.SessionTimeout, cfg.HeartbeatInterval = tc.tol, 10*time.Second, 3*time.Second
			}
			_, err := Register(context.Background(), cfg)
			if !errors.Is(err, ErrZKUnavailable) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want ErrZKUnavailable saying %q", err, tc.want)
			}
		})
	}
}

// TestStaleCacheDuringOutageIsNotServed (issue 17 item 3): a node crashed,
// its slot was taken by another node once the old claim expired, and the
// first node restarts while ZooKeeper is unreachable for it. Serving its
// cached slot would issue on the worker the other node issues on; it must
// refuse.
func TestStaleCacheDuringOutageIsNotServed(t *testing.T) {
	f := newFakeZK()
	hA := newTestHolder("a", nil, nil)
	cfgA := fakeConfig(t, f, hA, 9000)
	cfgA.Meta = Meta{IDCBits: 8, NodeBits: 2}
	f.wipe() // fakeConfig created the cluster with the default layout
	initFakeWith(t, f, cfgA.Meta.withDefaults())
	a := register(t, cfgA)
	sa, _ := a.Slot()
	// A crashes: its claim expires after the session timeout.
	sid := connOf(a).SessionID()
	f.DropEphemerals(sid)
	a.cancel() // stop its heartbeats without a clean shutdown
	<-a.done
	// B takes the slot: with 4 slots, fill the other three first.
	var taken bool
	for i := 0; i < 4 && !taken; i++ {
		cfg := fakeConfig(t, f, newTestHolder(fmt.Sprintf("b%d", i), nil, nil), 9100+i)
		cfg.Meta = cfgA.Meta
		b := register(t, cfg)
		s, _ := b.Slot()
		taken = s.Node == sa.Node
	}
	if !taken {
		t.Fatal("setup: no node took the crashed node's slot")
	}
	// A restarts with its properties file while ZooKeeper is down for it,
	// a session timeout after its last contact.
	p, err := readProperties(a.props)
	if err != nil {
		t.Fatal(err)
	}
	p.ZKContactMs -= cfgA.SessionTimeout.Milliseconds()
	if err := writeProperties(a.props, p); err != nil {
		t.Fatal(err)
	}
	f.setDown()
	cfg := cfgA
	cfg.Holder = newTestHolder("a2", nil, nil)
	cfg.AllowCachedSlotWithoutZK = Bool(true)
	if l, err := Register(context.Background(), cfg); err == nil {
		_ = l.Close(context.Background())
		t.Fatalf("a stale cached slot was served (node %d, another node's now)", sa.Node)
	} else if !errors.Is(err, ErrZKUnavailable) {
		t.Fatalf("err = %v, want ErrZKUnavailable", err)
	}
}

func TestDegradedSlotHeldByAnotherFencesAtOnce(t *testing.T) {
	f := newFakeZK()
	dir := t.TempDir()
	crashCache(t, dir, 9000, 5, time.Now().UnixMilli(), time.Now().UnixMilli())
	// Another node holds slot 5.
	other := fakeConfig(t, f, newTestHolder("other", nil, nil), 9001)
	otherDir := other.PropertiesDir
	if err := writeProperties(propertiesPath(otherDir, "idgen", 9001, "10.0.0.1"),
		properties{Cluster: "c1", IDC: 0, Node: 5, WorkerID: 5, HighWater: 1}); err != nil {
		t.Fatal(err)
	}
	o := register(t, other)
	if s, _ := o.Slot(); s.Node != 5 {
		t.Fatalf("setup: other node holds %d", s.Node)
	}

	f.setDown()
	h := newTestHolder("b", nil, nil)
	cfg := fakeConfig(t, f, h, 9000)
	cfg.PropertiesDir = dir
	cfg.AllowCachedSlotWithoutZK = Bool(true)
	l := register(t, cfg)
	if l.State() != StateDegraded {
		t.Fatalf("state %s, want degraded", l.State())
	}
	f.up()
	waitFor(t, "fence", 5*time.Second, func() bool { return len(h.snap().fenced) == 1 })
	if err := h.snap().fenced[0]; !errors.Is(err, ErrSlotTaken) || !strings.Contains(err.Error(), "held by session") {
		t.Fatalf("fence reason %v", err)
	}
	waitFor(t, "another slot", 5*time.Second, func() bool { return len(h.snap().acquired) == 2 })
	if s := h.snap().acquired[1]; s.Node == 5 {
		t.Fatal("kept the slot another node holds")
	}
}

func TestDegradedSlotUsedByAnotherMeanwhileWaitsPastTheirMark(t *testing.T) {
	f := newFakeZK()
	dir := t.TempDir()
	now := time.Now().UnixMilli()
	crashCache(t, dir, 9000, 5, now-5000, now)
	// Another node used slot 5 after this node's last write, and left.
	c, _, _ := f.connect(nil, 0)
	for _, p := range []string{"/t", "/t/c1", "/t/c1/idc-0", "/t/c1/idc-0/last"} {
		_, _ = c.Create(p, nil, 0, nil)
	}
	theirs := now + 300
	_, _ = c.Create("/t/c1/idc-0/last/5", toJSON(lastData{HighWater: theirs, Host: "10.9.9.9", Port: 1, PID: 1}), 0, nil)

	f.setDown()
	h := newTestHolder("b", nil, nil)
	cfg := fakeConfig(t, f, h, 9000)
	cfg.PropertiesDir = dir
	cfg.AllowCachedSlotWithoutZK = Bool(true)
	l := register(t, cfg)
	f.up()
	waitFor(t, "re-acquire", 5*time.Second, func() bool { return len(h.snap().acquired) == 2 })
	snap := h.snap()
	if len(snap.fenced) != 1 || !errors.Is(snap.fenced[0], ErrSlotTaken) {
		t.Fatalf("fenced %v, want ErrSlotTaken", snap.fenced)
	}
	if s := snap.acquired[1]; s.Node != 5 || s.NotBefore < theirs {
		t.Fatalf("re-acquired %+v, want node 5 past %d", s, theirs)
	}
	if l.State() != StateRegistered {
		t.Fatalf("state %s", l.State())
	}
	h.checkNoProblems(t)
}

func TestZooKeeperDownWithoutUsableCacheRefuses(t *testing.T) {
	f := newFakeZK()
	f.setDown()
	cfg := fakeConfig(t, f, newTestHolder("a", nil, nil), 9000)
	cfg.AllowCachedSlotWithoutZK = Bool(true)
	_, err := Register(context.Background(), cfg)
	if !errors.Is(err, ErrZKUnavailable) || !errors.Is(err, ErrNoCachedSlot) {
		t.Fatalf("err = %v, want ErrZKUnavailable and ErrNoCachedSlot", err)
	}
	cfg.AllowCachedSlotWithoutZK = nil
	_, err = Register(context.Background(), cfg)
	if !errors.Is(err, ErrZKUnavailable) || !strings.Contains(err.Error(), "AllowCachedSlotWithoutZK is off") {
		t.Fatalf("err = %v", err)
	}
}

func TestStandalone(t *testing.T) {
	dir := t.TempDir()
	clk := clocktest.New(time.Now())
	meta := Meta{CreatedMs: 1690000000000}
	h := newTestHolder("s", clk, nil)
	l, err := Standalone(StandaloneConfig{IDC: -1, Node: -1, Meta: meta, Host: "h", Port: 1, PropertiesDir: dir,
		Clock: clk, Holder: h, HeartbeatInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if s, ok := l.Slot(); !ok || s.Node != 0 || s.IDC != 0 || l.State() != StateRegistered {
		t.Fatalf("slot %+v state %s", s, l.State())
	}
	waitFor(t, "heartbeat", 5*time.Second, func() bool { return len(h.snap().extended) > 0 })
	if !h.issue() {
		t.Fatal("cannot issue")
	}
	used := h.LastUsed()
	if err := l.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	p, err := readProperties(propertiesPath(dir, "idgen", 1, "h"))
	if err != nil || p.HighWater != used {
		t.Fatalf("properties %+v (%v), want exact mark %d", p, err, used)
	}

	// Restart from the file, with the cached mark 2s ahead: waits past it.
	p.Node, p.WorkerID, p.HighWater = 9, 9, clock.Millis(clk)+2000
	if err := writeProperties(propertiesPath(dir, "idgen", 1, "h"), p); err != nil {
		t.Fatal(err)
	}
	h2 := newTestHolder("s2", clk, nil)
	l2, err := Standalone(StandaloneConfig{IDC: -1, Node: -1, Meta: meta, Host: "h", Port: 1, PropertiesDir: dir, Clock: clk, Holder: h2})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close(context.Background())
	if s, _ := l2.Slot(); s.Node != 9 || s.NotBefore != p.HighWater {
		t.Fatalf("restart slot %+v, want node 9 NotBefore %d", s, p.HighWater)
	}
	h2.checkNoProblems(t)

	// Too far ahead: refuse.
	p.HighWater = clock.Millis(clk) + time.Hour.Milliseconds()
	dir3 := t.TempDir()
	_ = writeProperties(propertiesPath(dir3, "idgen", 1, "h"), p)
	_, err = Standalone(StandaloneConfig{IDC: -1, Node: -1, Meta: meta, Host: "h", Port: 1, PropertiesDir: dir3, Clock: clk, Holder: newTestHolder("x", clk, nil)})
	if !errors.Is(err, ErrStartWaitTooLong) {
		t.Fatalf("err = %v, want ErrStartWaitTooLong", err)
	}
	if _, err := Standalone(StandaloneConfig{Meta: Meta{}, Holder: h}); !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), "CreatedMs") {
		t.Fatalf("err = %v, want one naming Meta.CreatedMs", err)
	}
}

func TestListAndWatchWorkers(t *testing.T) {
	f := newFakeZK()
	a := register(t, fakeConfig(t, f, newTestHolder("a", nil, nil), 9000))
	cfgB := fakeConfig(t, f, newTestHolder("b", nil, nil), 9001)
	cfgB.IDC = 1
	register(t, cfgB)
	c, _, _ := f.connect(nil, 0)

	ws, err := ListWorkers(context.Background(), c, "/t", "c1", -1)
	if err != nil {
		t.Fatal(err)
	}
	if len(ws) != 2 || ws[0].IDC != 0 || ws[1].IDC != 1 {
		t.Fatalf("workers %+v", ws)
	}
	sa, _ := a.Slot()
	w := ws[0]
	if w.Node != sa.Node || w.Worker != sa.Worker || w.Host != "10.0.0.1" || w.Port != 9000 || w.PID != os.Getpid() ||
		!w.SlotHeld || !w.HasHeartbeat || w.HighWater == 0 || w.AgeByLocalClock || w.StartedAt.IsZero() {
		t.Fatalf("worker %+v, slot %+v", w, sa)
	}
	if ws, _ := ListWorkers(context.Background(), c, "/t", "c1", 1); len(ws) != 1 || ws[0].Port != 9001 {
		t.Fatalf("idc filter: %+v", ws)
	}
	if _, err := ListWorkers(context.Background(), c, "/t", "nope", -1); err == nil {
		t.Fatal("unknown cluster listed without error")
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	counts := make(chan int, 100)
	go func() {
		_ = WatchWorkers(ctx, c, "/t", "c1", 0, func(ws []WorkerInfo, err error) {
			if err == nil {
				counts <- len(ws)
			}
		})
	}()
	if n := <-counts; n != 1 {
		t.Fatalf("first listing %d workers, want 1", n)
	}
	register(t, fakeConfig(t, f, newTestHolder("c", nil, nil), 9002))
	deadline := time.After(10 * time.Second)
	for {
		select {
		case n := <-counts:
			if n == 2 {
				return
			}
		case <-deadline:
			t.Fatal("watch did not report the new worker")
		}
	}
}
