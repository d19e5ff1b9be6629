package server

import (
	"context"
	"errors"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"

	"github.com/idgen/idgen/clock"
	"github.com/idgen/idgen/clock/clocktest"
	"github.com/idgen/idgen/issuer"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	idgensvc "github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/memstore"
	"github.com/idgen/idgen/segment/mysqlstore"
	"github.com/idgen/idgen/snowflake"
	"github.com/idgen/idgen/worker"
)

// family returns the series of family name in m's registry (none when
// it has no series).
func family(t *testing.T, m *metrics, name string) []*dto.Metric {
	t.Helper()
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return f.GetMetric()
		}
	}
	return nil
}

// labelKey is a series' labels as "label=value,..." in the registry's
// (sorted) label order.
func labelKey(s *dto.Metric) string {
	var kv []string
	for _, l := range s.GetLabel() {
		kv = append(kv, l.GetName()+"="+l.GetValue())
	}
	return strings.Join(kv, ",")
}

// gauges returns the values of the gauge family name in m's registry, by
// the value of label (the empty key for an unlabelled gauge).
func gauges(t *testing.T, m *metrics, name, label string) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, s := range family(t, m, name) {
		key := ""
		for _, l := range s.GetLabel() {
			if l.GetName() == label {
				key = l.GetValue()
			}
		}
		out[key] = s.GetGauge().GetValue()
	}
	return out
}

// TestMetricsReplication: the verdict gauge has 1 for the current verdict
// only, also after the verdict changes; the lossy gauge follows Lossy().
func TestMetricsReplication(t *testing.T) {
	m := newMetrics()
	if g := gauges(t, m, "idgen_mysql_replication_verdict", "verdict"); len(g) != 0 {
		t.Fatalf("verdict series before any MySQL check: %v", g)
	}
	if g := gauges(t, m, "idgen_mysql_replication_lossy", ""); g[""] != 0 || len(g) != 1 {
		t.Fatalf("idgen_mysql_replication_lossy before any check: %v", g)
	}
	for _, c := range []struct {
		r     mysqlstore.Replication
		lossy float64
		want  mysqlstore.Verdict
	}{
		{mysqlstore.Replication{Verdict: mysqlstore.VerdictAsync}, 1, mysqlstore.VerdictAsync},
		{mysqlstore.Replication{Verdict: mysqlstore.VerdictSemisyncLossless}, 0, mysqlstore.VerdictSemisyncLossless},
		{mysqlstore.Replication{Verdict: mysqlstore.VerdictReplica}, 1, mysqlstore.VerdictReplica},
		{mysqlstore.Replication{Verdict: mysqlstore.VerdictSemisyncDegraded}, 1, mysqlstore.VerdictSemisyncDegraded},
		{mysqlstore.Replication{Verdict: mysqlstore.VerdictUnknown}, 0, mysqlstore.VerdictUnknown},
		{mysqlstore.Replication{}, 0, mysqlstore.VerdictUnknown},
	} {
		m.setReplication(c.r)
		if got := gauges(t, m, "idgen_mysql_replication_lossy", "")[""]; got != c.lossy {
			t.Errorf("%q: idgen_mysql_replication_lossy %v, want %v", c.r.Verdict, got, c.lossy)
		}
		g := gauges(t, m, "idgen_mysql_replication_verdict", "verdict")
		if len(g) != len(mysqlstore.Verdicts()) {
			t.Errorf("%q: verdict series %v, want one per verdict", c.r.Verdict, g)
		}
		for _, v := range mysqlstore.Verdicts() {
			want := 0.0
			if v == c.want {
				want = 1
			}
			if got, ok := g[string(v)]; !ok || got != want {
				t.Errorf("after %q: idgen_mysql_replication_verdict{verdict=%q} = %v (present %v), want %v", c.r.Verdict, v, got, ok, want)
			}
		}
	}
}

// series returns the label sets of family name in m's registry, each as
// labelKey formats them.
func series(t *testing.T, m *metrics, name string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, s := range family(t, m, name) {
		out[labelKey(s)] = true
	}
	return out
}

// TestMetricsPreinitialised: the fixed label sets are on /metrics at 0
// before any event (so rate(), increase() and absent() see the first
// refusal or auth failure), and recording one of them counts from there.
func TestMetricsPreinitialised(t *testing.T) {
	m := newMetrics()
	auth := series(t, m, "idgen_auth_failures_total")
	for method := range idgensvc.NewServiceInfo().Methods {
		if !auth["method="+method] {
			t.Errorf("idgen_auth_failures_total{method=%q} not pre-initialised (have %v)", method, auth)
		}
	}
	if len(auth) != len(idgensvc.NewServiceInfo().Methods)+1 || !auth["method=/status"] {
		t.Errorf("idgen_auth_failures_total: %d series, want one per IDL method and /status: %v", len(auth), auth)
	}
	if panics := series(t, m, "idgen_rpc_panics_total"); len(panics) != len(idgensvc.NewServiceInfo().Methods) {
		t.Errorf("idgen_rpc_panics_total: %d series, want one per IDL method: %v", len(panics), panics)
	}
	reqs := series(t, m, "idgen_rpc_requests_total")
	for _, channel := range []string{"default", "unordered", "ordered", "snowflake"} {
		for _, code := range []string{"OK", "CLOCK_ROLLBACK", "CLOCK_JUMP", "WORKER_UNAVAILABLE", "SEGMENT_UNAVAILABLE", "RATE_LIMITED", "UNAUTHENTICATED", "INTERNAL"} {
			if key := "channel=" + channel + ",code=" + code + ",method=NextIDs"; !reqs[key] {
				t.Errorf("idgen_rpc_requests_total{%s} not pre-initialised", key)
			}
		}
	}
	codes := resultCodes()
	for c := idl.ErrorCode_INVALID_ARGUMENT; c <= idl.ErrorCode_CLOCK_JUMP; c++ {
		if !slices.Contains(codes, c.String()) {
			t.Errorf("resultCodes() %v lacks %s", codes, c)
		}
	}
	if len(reqs) != 4*len(codes) {
		t.Errorf("idgen_rpc_requests_total: %d series, want NextIDs x 4 channels x %d codes: %v", len(reqs), len(codes), reqs)
	}
	if lat := series(t, m, "idgen_rpc_duration_seconds"); len(lat) != 4 || !lat["channel=snowflake,method=NextIDs"] {
		t.Errorf("idgen_rpc_duration_seconds: %v, want NextIDs x 4 channels", lat)
	}
	if got := series(t, m, "idgen_ids_issued_total"); len(got) != 3 || !got["channel=unordered"] || !got["channel=ordered"] || !got["channel=snowflake"] {
		t.Errorf("idgen_ids_issued_total: %v, want the three channels", got)
	}
	// Every pre-initialised series is 0 until something happens.
	fams, err := m.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), "idgen_") {
			continue
		}
		for _, s := range f.GetMetric() {
			if v := s.GetCounter().GetValue() + s.GetGauge().GetValue() + float64(s.GetHistogram().GetSampleCount()); v != 0 {
				t.Errorf("%s %v = %v before any event", f.GetName(), s.GetLabel(), v)
			}
		}
	}
	m.rpcDone("NextIDs", "snowflake", time.Now(), &idl.IdgenError{Code: idl.ErrorCode_CLOCK_JUMP})
	if got := counterValue(t, m, "idgen_rpc_requests_total", "channel=snowflake,code=CLOCK_JUMP,method=NextIDs"); got != 1 {
		t.Errorf("after one CLOCK_JUMP answer: %v, want 1", got)
	}
}

// counterValue returns the counter value of the series of name whose
// labels are key (as labelKey formats them), -1 when there is none.
func counterValue(t *testing.T, m *metrics, name, key string) float64 {
	t.Helper()
	for _, s := range family(t, m, name) {
		if labelKey(s) == key {
			return s.GetCounter().GetValue()
		}
	}
	return -1
}

// histogramOf returns the sample count and sum of the unlabelled
// histogram name in m's registry (count -1 when absent).
func histogramOf(t *testing.T, m *metrics, name string) (count int64, sum float64) {
	t.Helper()
	ms := family(t, m, name)
	if len(ms) != 1 || ms[0].GetHistogram() == nil {
		return -1, 0
	}
	h := ms[0].GetHistogram()
	return int64(h.GetSampleCount()), h.GetSampleSum()
}

// TestMetricsClockJumpRejections: a snowflake reading past the slot's
// durable mark (a forward clock jump) counts in
// idgen_clock_jump_rejections_total, once per refused request, through
// the guard's hooks as the node wires them; a rollback still counts in
// idgen_clock_rollback_rejections_total only.
func TestMetricsClockJumpRejections(t *testing.T) {
	m := newMetrics()
	jumps := func() float64 { return counterValue(t, m, "idgen_clock_jump_rejections_total", "") }
	rollbacks := func() float64 { return counterValue(t, m, "idgen_clock_rollback_rejections_total", "") }
	if jumps() != 0 || rollbacks() != 0 {
		t.Fatalf("before any refusal: jumps %v, rollbacks %v; want both exported at 0", jumps(), rollbacks())
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	fc := clocktest.New(t0)
	guard := clock.NewGuard(clock.GuardConfig{Clock: fc, OnReject: m.clockRejected, OnJump: m.clockJumped}, 0)
	g, err := snowflake.New(snowflake.Config{Guard: guard, HighWater: t0.UnixMilli() + 5000})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Next(); err != nil {
		t.Fatal(err)
	}
	fc.Add(time.Hour) // forward jump, far past the mark
	for range 3 {
		if _, err := g.Next(); !errors.Is(err, snowflake.ErrClockJump) {
			t.Fatalf("after a forward jump: %v, want ErrClockJump", err)
		}
	}
	if jumps() != 3 || rollbacks() != 0 {
		t.Fatalf("after 3 jump refusals: jumps %v, rollbacks %v; want 3 and 0", jumps(), rollbacks())
	}
	g.Extend(fc.Now().UnixMilli() + 5000) // the mark caught up
	if _, err := g.Next(); err != nil {
		t.Fatal(err)
	}
	fc.Add(-time.Second) // rollback
	if _, err := g.Next(); !errors.Is(err, clock.ErrRollback) {
		t.Fatalf("after a step back: %v, want ErrRollback", err)
	}
	if jumps() != 3 || rollbacks() != 1 {
		t.Fatalf("after a rollback: jumps %v, rollbacks %v; want 3 and 1", jumps(), rollbacks())
	}
}

// TestMetricsSegmentWaits: a request that finds both UNORDERED buffers
// empty waits for the load and is counted (idgen_segment_waits_total) and
// timed (idgen_segment_wait_seconds); requests served from memory are not.
func TestMetricsSegmentWaits(t *testing.T) {
	m := newMetrics()
	if c, _ := histogramOf(t, m, "idgen_segment_wait_seconds"); c != 0 || counterValue(t, m, "idgen_segment_waits_total", "") != 0 {
		t.Fatalf("before any wait: histogram count %d, counter %v; want both exported at 0", c, counterValue(t, m, "idgen_segment_waits_total", ""))
	}
	ms := memstore.New()
	t.Cleanup(func() { _ = ms.Close() })
	biz, err := ms.CreateBiz(context.Background(), segment.Biz{Name: "w", Step: 1000})
	if err != nil {
		t.Fatal(err)
	}
	u, err := segment.NewUnordered(segment.UnorderedConfig{Store: ms, OnLoad: m.segmentLoaded, OnWait: m.segmentWaited})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = u.Close() })
	release := ms.Block()
	done := make(chan error, 1)
	go func() {
		_, err := u.Take(context.Background(), biz, 1)
		done <- err
	}()
	for ms.Blocked() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // the load hangs: the request waits
	release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	for range 10 {
		if _, err := u.Take(context.Background(), biz, 1); err != nil {
			t.Fatal(err)
		}
	}
	count, sum := histogramOf(t, m, "idgen_segment_wait_seconds")
	if n := counterValue(t, m, "idgen_segment_waits_total", ""); n != 1 || count != 1 {
		t.Fatalf("idgen_segment_waits_total %v, idgen_segment_wait_seconds count %d: want one wait", n, count)
	}
	if sum < 0.02 {
		t.Fatalf("idgen_segment_wait_seconds sum %v, want at least the 20ms the load hung", sum)
	}
}

// fakeLease is a worker lease whose last heartbeat the test sets.
type fakeLease struct {
	mu   sync.Mutex
	beat time.Time
}

func (l *fakeLease) Meta() worker.Meta               { return worker.Meta{} }
func (l *fakeLease) State() worker.State             { return worker.StateRegistered }
func (l *fakeLease) Slot() (worker.Slot, bool)       { return worker.Slot{}, true }
func (l *fakeLease) Close(ctx context.Context) error { return nil }
func (l *fakeLease) RequestExtend()                  {}
func (l *fakeLease) setBeat(t time.Time)             { l.mu.Lock(); l.beat = t; l.mu.Unlock() }
func (l *fakeLease) Status() worker.Status {
	l.mu.Lock()
	defer l.mu.Unlock()
	return worker.Status{State: worker.StateRegistered, HasSlot: true, LastHeartbeat: l.beat}
}

// TestMetricsHeartbeatAge: idgen_worker_heartbeat_age_seconds is the time
// since the lease's last successful mark write, computed at each scrape:
// it keeps growing while no heartbeat succeeds, drops when one does, and
// is absent while starting or before the first write.
func TestMetricsHeartbeatAge(t *testing.T) {
	m := newMetrics()
	nd := newNode(clock.System{}, Config{})
	m.reg.MustRegister(&heartbeatCollector{nd: nd})
	age := func() (float64, bool) {
		g := gauges(t, m, "idgen_worker_heartbeat_age_seconds", "")
		v, ok := g[""]
		return v, ok
	}
	if v, ok := age(); ok {
		t.Fatalf("while starting: %v, want no series", v)
	}
	l := &fakeLease{}
	nd.serving.Store(&serving{lease: l})
	if v, ok := age(); ok {
		t.Fatalf("before the first heartbeat: %v, want no series", v)
	}
	l.setBeat(time.Now().Add(-90 * time.Second))
	first, ok := age()
	if !ok || first < 90 || first > 100 {
		t.Fatalf("90 s after the last heartbeat: %v (present %v)", first, ok)
	}
	time.Sleep(20 * time.Millisecond)
	if later, _ := age(); later <= first {
		t.Fatalf("no heartbeat since: %v then %v, want it growing", first, later)
	}
	l.setBeat(time.Now())
	if v, _ := age(); v > 5 {
		t.Fatalf("just after a heartbeat: %v", v)
	}
}

// TestMetricsNodeExportsNewFamilies starts a standalone node in-process
// and checks the wiring: the heartbeat age is exported from its lease, the
// first UNORDERED request of a business waits for its first segment
// (counted), ORDERED requests observe the owners' persist latency, and the
// clock refusal and request-id drop counters are there at 0.
func TestMetricsNodeExportsNewFamilies(t *testing.T) {
	cfg, err := loadConfig([]string{"--data-dir", t.TempDir(), "--node", "7"}, func(string) string { return "" }, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	clk, _ := newClock()
	m := newMetrics()
	nd := newNode(clk, cfg)
	closeAll, err := nd.start(context.Background(), cfg, clk, m, 18889, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeAll)
	if v, ok := gauges(t, m, "idgen_worker_heartbeat_age_seconds", "")[""]; !ok || v < 0 || v > 10 {
		t.Errorf("idgen_worker_heartbeat_age_seconds of a fresh standalone node: %v (present %v)", v, ok)
	}
	for _, name := range []string{"idgen_clock_jump_rejections_total", "idgen_clock_rollback_rejections_total",
		"idgen_ordered_request_ids_dropped_total", "idgen_ordered_stored_request_ids_dropped_total"} {
		if v := counterValue(t, m, name, ""); v != 0 {
			t.Errorf("%s = %v, want exported at 0", name, v)
		}
	}
	if c, _ := histogramOf(t, m, "idgen_ordered_persist_duration_seconds"); c != 0 {
		t.Errorf("idgen_ordered_persist_duration_seconds count %d before any ORDERED request, want exported at 0", c)
	}

	ctx := context.Background()
	is := nd.serving.Load().is
	if _, err := is.CreateBiz(ctx, segment.Biz{Name: "newfam", Channels: []segment.Channel{segment.ChannelOrdered}}); err != nil {
		t.Fatal(err)
	}
	unordered, ordered := segment.ChannelUnordered, segment.ChannelOrdered
	for i := range 3 {
		if _, err := is.Next(ctx, issuer.Request{Biz: "newfam", Channel: &unordered, Count: 1}); err != nil {
			t.Fatalf("UNORDERED %d: %v", i, err)
		}
		if _, err := is.Next(ctx, issuer.Request{Biz: "newfam", Channel: &ordered, Count: 1, SubKey: "k"}); err != nil {
			t.Fatalf("ORDERED %d: %v", i, err)
		}
	}
	if n := counterValue(t, m, "idgen_segment_waits_total", ""); n != 1 {
		t.Errorf("idgen_segment_waits_total %v after a new business's first UNORDERED requests, want 1 (the first waits for its segment)", n)
	}
	if c, _ := histogramOf(t, m, "idgen_segment_wait_seconds"); c != 1 {
		t.Errorf("idgen_segment_wait_seconds count %d, want 1", c)
	}
	if c, sum := histogramOf(t, m, "idgen_ordered_persist_duration_seconds"); c < 1 || sum <= 0 {
		t.Errorf("idgen_ordered_persist_duration_seconds count %d sum %v after ORDERED requests, want the persists observed", c, sum)
	}
}

// TestMetricsServedNextIDs: a served NextIDs call counts in the same series
// whether its channel's series were looked up once (the pre-initialised
// channels) or by label on the call: idgen_rpc_requests_total{code="OK"},
// one latency sample of its channel, and idgen_ids_issued_total of the
// issuing channel; a refusal of the same channel counts under its code.
func TestMetricsServedNextIDs(t *testing.T) {
	m := newMetrics()
	latencyCount := func(channel string) uint64 {
		for _, s := range family(t, m, "idgen_rpc_duration_seconds") {
			if labelKey(s) == "channel="+channel+",method=NextIDs" {
				return s.GetHistogram().GetSampleCount()
			}
		}
		return 0
	}
	for i, channel := range append(nextIDsChannels, "invalid") {
		for n := 0; n <= i; n++ {
			m.rpcDone("NextIDs", channel, time.Now(), nil)
		}
		if got := counterValue(t, m, "idgen_rpc_requests_total", "channel="+channel+",code=OK,method=NextIDs"); got != float64(i+1) {
			t.Errorf("channel %s: %v served calls counted, want %d", channel, got, i+1)
		}
		if got := latencyCount(channel); got != uint64(i+1) {
			t.Errorf("channel %s: %d latency samples, want %d", channel, got, i+1)
		}
	}
	m.rpcDone("NextIDs", "ordered", time.Now(), &idl.IdgenError{Code: idl.ErrorCode_SEGMENT_UNAVAILABLE})
	if got := counterValue(t, m, "idgen_rpc_requests_total", "channel=ordered,code=SEGMENT_UNAVAILABLE,method=NextIDs"); got != 1 {
		t.Errorf("a refusal: %v, want 1", got)
	}
	if got := latencyCount("ordered"); got != 4 {
		t.Errorf("ordered latency samples after a refusal: %d, want 4 (refusals are timed too)", got)
	}
	m.rpcDone("CreateBiz", "", time.Now(), nil)
	if got := counterValue(t, m, "idgen_rpc_requests_total", "channel=,code=OK,method=CreateBiz"); got != 1 {
		t.Errorf("CreateBiz: %v, want 1", got)
	}
	m.observe(issuer.Response{Channel: segment.ChannelOrdered, Ranges: []segment.Range{{First: 1, Last: 3}}}, nil)
	m.observe(issuer.Response{Channel: segment.ChannelSnowflake, Ranges: []segment.Range{{First: 7, Last: 7}}}, nil)
	m.observe(issuer.Response{Channel: segment.Channel(9), Ranges: []segment.Range{{First: 1, Last: 2}}}, nil)
	m.observe(issuer.Response{Channel: segment.ChannelOrdered, Ranges: []segment.Range{{First: 4, Last: 9}}}, errors.New("refused"))
	for key, want := range map[string]float64{"channel=ordered": 3, "channel=snowflake": 1, "channel=unordered": 0, "channel=" + issuedLabel(segment.Channel(9)): 2} {
		if got := counterValue(t, m, "idgen_ids_issued_total", key); got != want {
			t.Errorf("idgen_ids_issued_total{%s} = %v, want %v", key, got, want)
		}
	}
}
