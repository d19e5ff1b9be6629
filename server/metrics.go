package server

import (
	"errors"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/idgen/idgen/internal/bizlabel"
	"github.com/idgen/idgen/issuer"
	idl "github.com/idgen/idgen/kitex_gen/idgen"
	idgensvc "github.com/idgen/idgen/kitex_gen/idgen/idgenservice"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/mysqlstore"
	"github.com/idgen/idgen/worker"
)

// metrics is the node's Prometheus registry. Counters on the hot path are
// plain prometheus counters; everything that is state (buffers, worker
// state, clock) is read at scrape time by a collector, so the hot path pays
// nothing for it. Label values are bounded: methods, channels, codes and
// states are fixed sets; per-business series come only from segment buffers
// that exist on this node.
type metrics struct {
	reg *prometheus.Registry

	requests  *prometheus.CounterVec   // method, channel, code
	latency   *prometheus.HistogramVec // method, channel
	issued    *prometheus.CounterVec   // channel
	fallbacks prometheus.Counter
	rollbacks prometheus.Counter
	jumps     prometheus.Counter
	loadDur   prometheus.Histogram
	loadFail  prometheus.Counter
	waits     prometheus.Counter
	waitDur   prometheus.Histogram
	unsafeDB  prometheus.Gauge
	replLossy prometheus.Gauge
	replState *prometheus.GaugeVec // verdict
	// authFailures counts refused admin and client tokens by method
	// (written by authFailures, whose log lines are rate-limited).
	authFailures *prometheus.CounterVec // method
	// panics counts the RPC handlers' panics by method (bugs: each is
	// answered INTERNAL; the log shows a few stack traces per minute).
	panics *prometheus.CounterVec // method
	// ORDERED requests this node forwarded whole to a shard's owner (which
	// applies the policy and answers), and those that failed (owner
	// unreachable or refusing, limits included).
	orderedForwards, orderedForwardFailures prometheus.Counter

	// The series every served NextIDs call writes, looked up once
	// (preinit; read-only afterwards): WithLabelValues hashes and
	// validates its label values on every call, and three of them were
	// about 3% of the node's CPU per cached ORDERED request (perf profile
	// of an owner under load, issue 31). Refusals and the other methods
	// still go through WithLabelValues.
	nextOK   map[string]nextSeries                  // by channel label (channelLabel)
	issuedBy map[segment.Channel]prometheus.Counter // by issuing channel
}

// nextSeries is one channel's idgen_rpc_requests_total{method="NextIDs",
// code="OK"} and idgen_rpc_duration_seconds{method="NextIDs"}.
type nextSeries struct {
	ok  prometheus.Counter
	dur prometheus.Observer
}

func newMetrics() *metrics {
	reg := prometheus.NewRegistry()
	m := &metrics{
		reg: reg,
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idgen_rpc_requests_total",
			Help: "RPC requests by method, channel (NextIDs only) and result code (OK or an ErrorCode)."},
			[]string{"method", "channel", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "idgen_rpc_duration_seconds",
			Help:    "RPC handler latency by method and channel.",
			Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5}},
			[]string{"method", "channel"}),
		issued: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idgen_ids_issued_total",
			Help: "IDs handed out, by the channel that served them."}, []string{"channel"}),
		fallbacks: prometheus.NewCounter(prometheus.CounterOpts{Name: "idgen_snowflake_fallbacks_total",
			Help: "SNOWFLAKE requests served from the business's segment because snowflake refused."}),
		rollbacks: prometheus.NewCounter(prometheus.CounterOpts{Name: "idgen_clock_rollback_rejections_total",
			Help: "Snowflake requests refused because the clock stepped back further than max_backward_wait."}),
		jumps: prometheus.NewCounter(prometheus.CounterOpts{Name: "idgen_clock_jump_rejections_total",
			Help: "Snowflake requests refused because the clock read past the worker slot's durable high-water mark (a forward clock jump, or a mark not extended in time; answered CLOCK_JUMP unless the business falls back)."}),
		loadDur: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "idgen_segment_load_duration_seconds",
			Help:    "Time to reserve one UNORDERED segment from the store (background refills and waits).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		loadFail: prometheus.NewCounter(prometheus.CounterOpts{Name: "idgen_segment_load_failures_total",
			Help: "UNORDERED segment reservations that failed (store down, regressed, floor)."}),
		waits: prometheus.NewCounter(prometheus.CounterOpts{Name: "idgen_segment_waits_total",
			Help: "UNORDERED requests that found both buffers of their business empty and waited for a segment load (the double buffer makes this rare)."}),
		waitDur: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "idgen_segment_wait_seconds",
			Help:    "How long UNORDERED requests waited for a segment load (served, failed or given up at their deadline); _count equals idgen_segment_waits_total.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)}),
		unsafeDB: prometheus.NewGauge(prometheus.GaugeOpts{Name: "idgen_mysql_durability_unsafe",
			Help: "1 when the MySQL server is not crash-safe (innodb_flush_log_at_trx_commit or sync_binlog not 1) and the node was told to accept it: a MySQL crash may repeat IDs."}),
		replLossy: prometheus.NewGauge(prometheus.GaugeOpts{Name: "idgen_mysql_replication_lossy",
			Help: "1 when the MySQL replication setup read at start can lose reservations in a failover (async, semisync-degraded, semisync-after-commit, or the server is a replica); see idgen_mysql_replication_verdict."}),
		replState: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "idgen_mysql_replication_verdict",
			Help: "1 for the MySQL replication verdict read at start (galera, group-replication, semisync-lossless, no-replica, semisync-degraded, semisync-after-commit, async, replica, unknown), 0 for the others; absent without MySQL."},
			[]string{"verdict"}),
		authFailures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idgen_auth_failures_total",
			Help: "RPCs refused for a missing or wrong admin or client token, by method, and /status pages refused (method=\"/status\"); the log has one line per method per 10 s."},
			[]string{"method"}),
		panics: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "idgen_rpc_panics_total",
			Help: "RPC handler panics by method, each answered INTERNAL: a bug to report (the log has at most one stack trace per 20 s)."},
			[]string{"method"}),
		orderedForwards: prometheus.NewCounter(prometheus.CounterOpts{Name: "idgen_ordered_forwarded_total",
			Help: "ORDERED NextIDs requests this node forwarded whole to the shard's owner, which checks and answers them (one internal hop; the Go client sends to the owner directly)."}),
		orderedForwardFailures: prometheus.NewCounter(prometheus.CounterOpts{Name: "idgen_ordered_forward_failures_total",
			Help: "Forwarded ORDERED requests that failed: the owner unreachable, refusing (lease wait, hand-off) or the map stale."}),
	}
	reg.MustRegister(m.orderedForwards, m.orderedForwardFailures)
	reg.MustRegister(m.requests, m.latency, m.issued, m.fallbacks, m.rollbacks, m.jumps, m.loadDur, m.loadFail, m.waits, m.waitDur, m.unsafeDB,
		m.replLossy, m.replState, m.authFailures, m.panics,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.preinit()
	return m
}

// nextIDsChannels are the channel label values of NextIDs (channelLabel)
// that are pre-initialised; "invalid" appears only when a caller sends one.
var nextIDsChannels = []string{"default", segment.ChannelUnordered.String(), segment.ChannelOrdered.String(), segment.ChannelSnowflake.String()}

// resultCodes returns the code label values of idgen_rpc_requests_total:
// OK and every ErrorCode of the IDL.
func resultCodes() []string {
	codes := []string{"OK"}
	for c := idl.ErrorCode(1); c.String() != "<UNSET>"; c++ {
		codes = append(codes, c.String())
	}
	return codes
}

// preinit creates the series of the fixed label sets at 0, so that a
// refusal code, an auth failure or a channel not used yet is a 0 on
// /metrics rather than absent: rate(), increase() and absent() (the
// dashboard, the alerts) then see the first event as a change. Only fixed
// sets: NextIDs' channels and result codes, the issuing channels, the IDL's
// methods; per-business series stay created on use.
func (m *metrics) preinit() {
	m.nextOK = map[string]nextSeries{}
	for _, channel := range nextIDsChannels {
		for _, code := range resultCodes() {
			m.requests.WithLabelValues("NextIDs", channel, code)
		}
		m.nextOK[channel] = nextSeries{ok: m.requests.WithLabelValues("NextIDs", channel, "OK"),
			dur: m.latency.WithLabelValues("NextIDs", channel)}
	}
	m.issuedBy = map[segment.Channel]prometheus.Counter{}
	for _, c := range []segment.Channel{segment.ChannelUnordered, segment.ChannelOrdered, segment.ChannelSnowflake} {
		m.issuedBy[c] = m.issued.WithLabelValues(issuedLabel(c))
	}
	for method := range idgensvc.NewServiceInfo().Methods {
		m.authFailures.WithLabelValues(method)
		m.panics.WithLabelValues(method)
	}
	m.authFailures.WithLabelValues(statusAuthMethod) // refused /status readers (status.go)
}

// clockRejected counts a snowflake reading the clock guard refused
// because the clock stepped back (GuardConfig.OnReject).
func (m *metrics) clockRejected(time.Duration) { m.rollbacks.Inc() }

// clockJumped counts a snowflake reading the generator refused because it
// is past the slot's durable high-water mark (GuardConfig.OnJump).
func (m *metrics) clockJumped(time.Duration) { m.jumps.Inc() }

// setDurability exports the MySQL durability check done at start.
func (m *metrics) setDurability(d mysqlstore.Durability) { m.unsafeDB.Set(b2f(!d.Safe())) }

// setReplication exports the MySQL replication verdict: the lossy gauge,
// and 1 for the verdict (0 for every other one, so a change of verdict
// between calls leaves no stale 1).
func (m *metrics) setReplication(r mysqlstore.Replication) {
	v := r.Verdict
	if v == "" {
		v = mysqlstore.VerdictUnknown
	}
	m.replLossy.Set(b2f(r.Lossy()))
	for _, each := range mysqlstore.Verdicts() {
		m.replState.WithLabelValues(string(each)).Set(b2f(each == v))
	}
}

func (m *metrics) segmentLoaded(_ string, d time.Duration, err error) {
	m.loadDur.Observe(d.Seconds())
	if err != nil {
		m.loadFail.Inc()
	}
}

// segmentWaited records an UNORDERED request that waited for a segment
// load (UnorderedConfig.OnWait), whatever the wait ended with.
func (m *metrics) segmentWaited(_ string, d time.Duration, _ error) {
	m.waits.Inc()
	m.waitDur.Observe(d.Seconds())
}

// rpcDone records one RPC; channel is "" for methods other than NextIDs.
func (m *metrics) rpcDone(method, channel string, start time.Time, err error) {
	if err == nil && method == "NextIDs" {
		if s, ok := m.nextOK[channel]; ok {
			s.ok.Inc()
			s.dur.Observe(time.Since(start).Seconds())
			return
		}
	}
	code := "OK"
	if err != nil {
		code = idl.ErrorCode_INTERNAL.String()
		var ie *idl.IdgenError
		if errors.As(err, &ie) {
			code = ie.Code.String()
		}
	}
	m.requests.WithLabelValues(method, channel, code).Inc()
	m.latency.WithLabelValues(method, channel).Observe(time.Since(start).Seconds())
}

// observe records what NextIDs handed out.
func (m *metrics) observe(resp issuer.Response, err error) {
	if err != nil {
		return
	}
	if c, ok := m.issuedBy[resp.Channel]; ok {
		c.Add(float64(resp.Count()))
	} else {
		m.issued.WithLabelValues(issuedLabel(resp.Channel)).Add(float64(resp.Count()))
	}
	if resp.Fallback {
		m.fallbacks.Inc()
	}
}

// issuedLabel names the channel that served: SLOW_ORDERED counts as
// ordered (one processor, one sequence); a custom strategy by its value
// (only registered channels serve, so the label set stays bounded).
func issuedLabel(ch segment.Channel) string {
	switch ch {
	case segment.ChannelUnordered, segment.ChannelOrdered, segment.ChannelSnowflake:
		return ch.String()
	case issuer.ChannelSlowOrdered:
		return segment.ChannelOrdered.String()
	}
	return strconv.Itoa(int(ch))
}

// register adds the scrape-time collectors of node state.
func (m *metrics) register(nd *node) {
	m.reg.MustRegister(&stateCollector{nd: nd}, &heartbeatCollector{nd: nd})
}

var descBeatAge = prometheus.NewDesc("idgen_worker_heartbeat_age_seconds",
	"Seconds since the worker lease last wrote its slot's high-water mark successfully (ZooKeeper and the properties file; the properties file alone while degraded or standalone; the MySQL worker table). Grows while heartbeats fail; SNOWFLAKE serves up to the last mark written (about heartbeat_interval + outage_tolerance ahead with ZooKeeper or MySQL), then refuses with CLOCK_JUMP.",
	nil, nil)

// heartbeatCollector exports the age of the worker lease's last successful
// mark write, computed at scrape time from its timestamp, so the age keeps
// growing while heartbeats fail (a gauge set by the heartbeat would freeze
// at its last value exactly then). Absent while starting or before the
// lease's first write.
type heartbeatCollector struct {
	nd *node
}

// leaseStatus is what the worker leases (ZooKeeper, MySQL, standalone)
// report beyond worker.Lease.
type leaseStatus interface{ Status() worker.Status }

func (c *heartbeatCollector) Describe(ch chan<- *prometheus.Desc) { ch <- descBeatAge }

func (c *heartbeatCollector) Collect(ch chan<- prometheus.Metric) {
	sv := c.nd.serving.Load()
	if sv == nil || sv.lease == nil {
		return
	}
	ls, ok := sv.lease.(leaseStatus)
	if !ok {
		return
	}
	last := ls.Status().LastHeartbeat
	if last.IsZero() {
		return
	}
	ch <- prometheus.MustNewConstMetric(descBeatAge, prometheus.GaugeValue, max(time.Since(last).Seconds(), 0))
}

var (
	descState = prometheus.NewDesc("idgen_worker_state", "1 for the worker lease's current state (registered, degraded, fenced, none).",
		[]string{"state"}, nil)
	descNode = prometheus.NewDesc("idgen_node_state", "1 for the node's serving state (serving, degraded, clock_rollback, clock_jump, fenced, starting).",
		[]string{"state"}, nil)
	descReady = prometheus.NewDesc("idgen_channel_ready",
		"1 when the channel serves now (strict, as /readyz?channel=...); 0 when it refuses or is disabled by the configuration.",
		[]string{"channel", "state"}, nil)
	descMeta = prometheus.NewDesc("idgen_cluster_meta_changed",
		"1 when the cluster's created_ms in the worker registry differs from the one this node started with (ZooKeeper lost its state); the node keeps its floor.",
		nil, nil)
	descWorker = prometheus.NewDesc("idgen_worker_id", "Worker ID in use, -1 when none.", nil, nil)
	descBehind = prometheus.NewDesc("idgen_clock_behind_seconds",
		"How far the wall clock is below the last issued snowflake timestamp (0 normally).", nil, nil)
	descOffset = prometheus.NewDesc("idgen_clock_offset_seconds",
		"This node's clock minus ZooKeeper's, measured at the last heartbeat (cluster mode).", nil, nil)
	descZK   = prometheus.NewDesc("idgen_zookeeper_connected", "1 when the ZooKeeper session is connected (cluster mode).", nil, nil)
	descLoss = prometheus.NewDesc("idgen_zookeeper_state_losses_total",
		"Losses of ZooKeeper state this node detected (a mark of its own went back or vanished, the cluster record was gone or re-created, the ensemble refused its zxid); each marked the cluster restored.", nil, nil)
	// The node's one ZooKeeper session (cluster/zksession), shared by every guard.
	descZKClients = prometheus.NewDesc("idgen_zookeeper_client_replacements_total",
		"ZooKeeper clients replaced because the session was gone (expired on a serving ensemble, or the ensemble lost writes and refused the old client).", nil, nil)
	descZKRestores = prometheus.NewDesc("idgen_zookeeper_restores_total",
		"ZooKeeper wipes or restores from an older copy detected by the node's session (cluster check, or lost writes); every guard applies the restore rule.", nil, nil)
	descZKRefused = prometheus.NewDesc("idgen_zookeeper_session_refused",
		"1 when the cluster check refused this node for good (e.g. the cluster was re-created): every guard stops; see the log and /readyz.", nil, nil)
	descBadMark = prometheus.NewDesc("idgen_worker_unreadable_marks_total",
		"Worker slots skipped because their last/<node> high-water mark could not be decoded (repair or delete the znode).", nil, nil)
	descRemain = prometheus.NewDesc("idgen_segment_remaining", "UNORDERED IDs left in memory for a business (current + next buffer).",
		[]string{"biz"}, nil)
	descRemainPct = prometheus.NewDesc("idgen_segment_remaining_ratio",
		"UNORDERED IDs left in memory relative to the current step (below the low-water mark a refill runs; near 0 with no next buffer means callers will soon wait).",
		[]string{"biz"}, nil)
	descStep = prometheus.NewDesc("idgen_segment_step", "Current adaptive UNORDERED step per business.", []string{"biz"}, nil)
	descFail = prometheus.NewDesc("idgen_segment_business_load_failures_total", "Failed segment loads per business.", []string{"biz"}, nil)
	descRegr = prometheus.NewDesc("idgen_segment_regressions_total",
		"Segments refused because the store returned numbers not above ones already received (failover to a lagging replica).", []string{"biz"}, nil)
	nodeStates   = []string{chServing, chDegraded, chRollback, chJump, chFenced, chStarting}
	workerStates = []worker.State{worker.StateRegistered, worker.StateDegraded, worker.StateFenced, worker.StateNone}
)

type stateCollector struct {
	nd *node
}

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descState, descNode, descReady, descMeta, descWorker, descBehind, descOffset, descZK, descLoss, descBadMark,
		descZKClients, descZKRestores, descZKRefused, descRemain, descRemainPct, descStep, descFail, descRegr} {
		ch <- d
	}
}

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.nd.status()
	for _, s := range nodeStates {
		ch <- prometheus.MustNewConstMetric(descNode, prometheus.GaugeValue, b2f(st.State == s), s)
	}
	for name, cs := range st.Channels {
		ch <- prometheus.MustNewConstMetric(descReady, prometheus.GaugeValue, b2f(cs.Ready), name, cs.State)
	}
	if zs := c.nd.zk.Load(); zs != nil {
		v := zs.View()
		ch <- prometheus.MustNewConstMetric(descZKClients, prometheus.CounterValue, float64(max(v.Client-1, 0)))
		ch <- prometheus.MustNewConstMetric(descZKRestores, prometheus.CounterValue, float64(v.Restores))
		ch <- prometheus.MustNewConstMetric(descZKRefused, prometheus.GaugeValue, b2f(v.Refused != ""))
	}
	sv := c.nd.serving.Load()
	if sv == nil {
		return
	}
	ws := sv.lease.State()
	for _, s := range workerStates {
		ch <- prometheus.MustNewConstMetric(descState, prometheus.GaugeValue, b2f(ws == s), string(s))
	}
	ch <- prometheus.MustNewConstMetric(descWorker, prometheus.GaugeValue, float64(sv.is.Worker()))
	ch <- prometheus.MustNewConstMetric(descBehind, prometheus.GaugeValue, sv.is.Guard().Behind().Seconds())
	ch <- prometheus.MustNewConstMetric(descMeta, prometheus.GaugeValue,
		b2f(sv.lease.Meta().CreatedMs != 0 && sv.is.Layout().Floor(sv.lease.Meta().CreatedMs) != c.nd.floor))
	if z, ok := sv.lease.(*worker.ZKLease); ok {
		zs := z.Status()
		ch <- prometheus.MustNewConstMetric(descZK, prometheus.GaugeValue, b2f(zs.ZKConnected))
		ch <- prometheus.MustNewConstMetric(descLoss, prometheus.CounterValue, float64(zs.StateLosses))
		ch <- prometheus.MustNewConstMetric(descBadMark, prometheus.CounterValue, float64(zs.UnreadableMarks))
		if zs.ClockOffsetKnown {
			ch <- prometheus.MustNewConstMetric(descOffset, prometheus.GaugeValue, zs.ClockOffset.Seconds())
		}
	}
	// Per-business series only for the businesses within the node's label
	// cap (metrics_max_bizs): the others' counters are summed under
	// biz="_other" and their gauges (meaningless as a sum) left out.
	var otherFail, otherRegr uint64
	others := false
	for _, s := range sv.unordered.Stats() {
		label := sv.is.BizLabel(s.Biz)
		if label == bizlabel.Other {
			others = true
			otherFail += s.LoadFailures
			otherRegr += s.Regressions
			continue
		}
		left := s.CurrentRemaining + s.NextRemaining
		ch <- prometheus.MustNewConstMetric(descRemain, prometheus.GaugeValue, float64(left), label)
		if s.Step > 0 {
			ch <- prometheus.MustNewConstMetric(descRemainPct, prometheus.GaugeValue, float64(left)/float64(s.Step), label)
		}
		ch <- prometheus.MustNewConstMetric(descStep, prometheus.GaugeValue, float64(s.Step), label)
		ch <- prometheus.MustNewConstMetric(descFail, prometheus.CounterValue, float64(s.LoadFailures), label)
		ch <- prometheus.MustNewConstMetric(descRegr, prometheus.CounterValue, float64(s.Regressions), label)
	}
	if others {
		ch <- prometheus.MustNewConstMetric(descFail, prometheus.CounterValue, float64(otherFail), bizlabel.Other)
		ch <- prometheus.MustNewConstMetric(descRegr, prometheus.CounterValue, float64(otherRegr), bizlabel.Other)
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
