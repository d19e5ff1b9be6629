// Package sim is the cluster simulator of issue 29: several in-process idgen
// nodes run the real worker lease (worker.ZKLease) and snowflake generator,
// the issuer's policy path, UNORDERED segments and the ORDERED shard owners
// (ordered/zkown and the ordered allocator), while a seed draws faults at
// the boundaries: the one in-memory ZooKeeper (internal/zkfake), the
// simulated MySQL primary (memstore plus an epoch-fenced ORDERED store,
// db.go), the nodes' clocks and their processes. A load of every channel,
// with request ids and retries, is recorded and judged by faults/checker
// (no number twice per business and channel, per sub key on ORDERED;
// real-time order per ORDERED key) and by the replay check here (a
// request id answered twice returns the same range).
//
// Reproducibility: the fault schedule (what happens, to whom, when) is a
// pure function of the seed and is printed with every failure; Run(seed)
// replays it. The goroutine interleavings are not deterministic (the real
// code runs on real timers), so a failing seed is a schedule that makes
// the failure likely, not certain: Repeat runs it again.
package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
	"go.uber.org/zap"

	zkcluster "github.com/idgen/idgen/cluster"
	clusterinc "github.com/idgen/idgen/cluster/incarnation"
	"github.com/idgen/idgen/faults/checker"
	"github.com/idgen/idgen/internal/zkfake"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/worker"
)

// Options configure a run.
type Options struct {
	// Nodes is the cluster size (default 3).
	Nodes int
	// Duration is how long faults are drawn for, after a warm-up and
	// before a settling period (default 3s).
	Duration time.Duration
	// Control names a negative control (Controls): its hole is reopened
	// and its fault mix drawn. "" runs the default mix on the real code.
	Control string
	// Logger receives the nodes' logs (nil: none).
	Logger *zap.Logger
}

// Result is one seed's outcome.
type Result struct {
	Seed     uint64
	Schedule []string // the drawn faults, as printed
	Report   *checker.Report
	Replays  int      // request-id replays checked
	Replay   []string // replays that returned another range
	Stuck    []string // availability: what a node could not serve after the faults ended
	// Let is what a guard let through that the simulator checks directly,
	// not through the load: a node of another cluster that started on the
	// database, or ran a statement there (hole k). A safety finding.
	Let []string
	// MaxLag is the worst scheduling delay seen by a 10 ms ticker during
	// the run. Above OverloadLag the machine starved the run: its
	// availability findings and start failures are not judged (they are
	// timing), its safety findings are (they must hold at any speed).
	MaxLag time.Duration
	Err    error // the run itself failed (a node could not start)
	Took   time.Duration
	// Limit: every violation is explained by a documented limit of the
	// product (limits.go), which the run reached; not unsafe.
	Limit bool
	// LimitEvidence is what Limit was decided on (limitEvents.evidence),
	// kept when the run failed or reached the limit.
	LimitEvidence []string
}

// Failed reports a violation (or a run that could not be judged).
func (r *Result) Failed() bool {
	if r.Unsafe() {
		return true
	}
	if r.Overloaded() {
		return false
	}
	return r.Err != nil || len(r.Stuck) > 0
}

// OverloadLag is the scheduling delay above which a run counts as starved
// by the machine: a third of the simulated session timeout.
const OverloadLag = sessionTimeout / 3

// Overloaded reports that the machine starved the run (see MaxLag).
func (r *Result) Overloaded() bool { return r.MaxLag > OverloadLag }

// Unsafe reports a safety violation: a number twice, an order violation,
// a (worker, ms) of two incarnations, or a replay with another range (not
// availability).
func (r *Result) Unsafe() bool {
	return len(r.Replay) > 0 || len(r.Let) > 0 || (r.Report != nil && r.Report.Failed() && !r.Limit)
}

// String is the seed's verdict with, on failure, its schedule and findings.
func (r *Result) String() string {
	var b strings.Builder
	verdict := "ok"
	if r.Failed() {
		verdict = "FAILED"
	}
	if !r.Failed() && r.Overloaded() && (r.Err != nil || len(r.Stuck) > 0) {
		verdict = "inconclusive"
	}
	if !r.Failed() && r.Limit {
		verdict = "limit (documented: a barrier member counted gone during a lossy failover; its keys may repeat)"
	}
	fmt.Fprintf(&b, "seed %d: %s (%v, max scheduling lag %v)", r.Seed, verdict, r.Took.Round(time.Millisecond), r.MaxLag.Round(time.Millisecond))
	if r.Report != nil {
		fmt.Fprintf(&b, ": %d calls, %d ok, %d IDs, %d duplicates, %d order, %d worker-ms, %d replays (%d differ)",
			r.Report.Calls, r.Report.OK, r.Report.IDs, r.Report.Duplicates, r.Report.Order, r.Report.WorkerMs, r.Replays, len(r.Replay))
	}
	if r.Err != nil {
		fmt.Fprintf(&b, ": %v", r.Err)
	}
	if r.Failed() || verdict == "inconclusive" || r.Limit {
		b.WriteString("\n  schedule (replay with --seed " + fmt.Sprint(r.Seed) + "):")
		for _, s := range r.Schedule {
			b.WriteString("\n    " + s)
		}
		if r.Report != nil {
			for _, f := range r.Report.Findings {
				fmt.Fprintf(&b, "\n  %s: %s", f.Kind, f.Detail)
			}
		}
		for _, s := range r.LimitEvidence {
			b.WriteString("\n  limit evidence: " + s)
		}
		for _, s := range r.Replay {
			b.WriteString("\n  replay: " + s)
		}
		for _, s := range r.Let {
			b.WriteString("\n  let through: " + s)
		}
		for i, s := range r.Stuck {
			if i == 6 {
				fmt.Fprintf(&b, "\n  availability: ... and %d more", len(r.Stuck)-i)
				break
			}
			b.WriteString("\n  availability: " + s)
		}
	}
	return b.String()
}

// watchLag records in *max the worst lateness of a 10 ms ticker until the
// returned func is called (idempotent).
func watchLag(maxLag *time.Duration) func() {
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		const every = 10 * time.Millisecond
		t := time.NewTicker(every)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-stop:
				return
			case now := <-t.C:
				if lag := time.Since(last) - every; lag > *maxLag {
					*maxLag = lag
				}
				last = now
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(stop); <-done }) }
}

// cluster is one run's world.
type cluster struct {
	zk    *zkfake.Server
	db    *db
	nodes []*node
	byAdr map[string]*node
	ctl   controls
	log   *zap.Logger
	// lossless: the seed's schedule has no lossy failover, so the
	// simulated replication's verdict is "cannot lose" (what the server
	// reads from MySQL): the nodes renew the store-held ORDERED lease and
	// let the barrier's bound pass while ZooKeeper is out of reach, as a
	// server on lossless replication does.
	lossless bool
	// initSnap is ZooKeeper's state right after cluster init.
	initSnap zkfake.Snapshot
	// intruder is the one node of the second cluster (otherCluster) that
	// other-cluster starts on this cluster's database.
	intruder *node
	// let is what a guard let through (Result.Let).
	let []string

	gmu   sync.Mutex
	grave []incarnation // killed incarnations, stopped at the end
	// limits records the events a documented limit needs (limits.go).
	limits limitEvents
	bg     sync.WaitGroup
}

func (c *cluster) graveyard(p incarnation) {
	c.gmu.Lock()
	c.grave = append(c.grave, p)
	c.gmu.Unlock()
}

// The clusters: the simulated one, and the second cluster whose node
// other-cluster starts on the same database (hole k). Both are created on
// the one simulated ZooKeeper, each in its own subtree.
const (
	simCluster   = "sim"
	otherCluster = "sim2"
)

// The bit split: 4 slots per IDC (all nodes run in IDC 0), so that slots
// change hands between nodes often (a crash restart takes another free
// slot, the next node the freed one), exercising rules 2 and 3 of the
// slot invariant far more than 256 slots would.
const (
	idcBits  = 8
	nodeBits = 2
)

// Businesses of the load.
const (
	bizSnowflake = "sf"
	bizUnordered = "un"
	bizCached    = "oc"
	bizGapless   = "og"
)

// Run runs one seed.
func Run(seed uint64, o Options) *Result {
	start := time.Now()
	if o.Nodes <= 0 {
		o.Nodes = 3
	}
	if o.Duration <= 0 {
		o.Duration = 3 * time.Second
	}
	if o.Logger == nil {
		o.Logger = zap.NewNop()
	}
	res := &Result{Seed: seed}
	stopLag := watchLag(&res.MaxLag)
	defer stopLag()
	ctl, mix, err := controlFor(o.Control)
	if err != nil {
		res.Err = err
		return res
	}
	sched, skews := draw(seed, o.Nodes, o.Duration, mix)
	res.Schedule = append(res.Schedule, fmt.Sprintf("clock skews %v, control %q, mix %v", skews, o.Control, mix))
	for _, e := range sched {
		res.Schedule = append(res.Schedule, e.String())
	}
	dir, err := os.MkdirTemp("", "idgen-sim-")
	if err != nil {
		res.Err = err
		return res
	}
	defer os.RemoveAll(dir)
	c := &cluster{zk: zkfake.New(), db: newDB(seed, ctl.noFence), byAdr: map[string]*node{}, ctl: ctl, log: o.Logger, lossless: true}
	for _, e := range sched {
		if e.kind == kFailover {
			c.lossless = false
		}
	}
	defer c.zk.Close()
	if err := c.setup(dir, skews); err != nil {
		res.Err = err
		c.shutdown()
		return res
	}
	rec := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	var load sync.WaitGroup
	for i := range 6 {
		load.Add(1)
		go func() {
			defer load.Done()
			c.caller(ctx, fmt.Sprintf("c%d", i), rand.New(rand.NewPCG(seed, uint64(i)+1)), rec)
		}()
	}
	t0 := time.Now()
	c.play(ctx, t0, sched)
	// Settle: every paused node thawed, every killed or stopped one
	// restarted (play does both), then a little more load.
	time.Sleep(500 * time.Millisecond)
	cancel()
	load.Wait()
	c.bg.Wait()
	res.Stuck = c.probe(probeWait, rec)
	c.shutdown()
	stopLag()
	res.Report = checker.Check(rec.okCalls(), checker.Options{Layout: checker.DefaultLayout})
	res.Limit = res.Report.Failed() && c.limits.explains(res.Report)
	if res.Report.Failed() {
		res.LimitEvidence = c.limits.evidence(res.Report)
	}
	res.Replays, res.Replay = rec.replays, rec.replayDiffs
	res.Let = c.let
	res.Took = time.Since(start)
	return res
}

// setup creates the cluster (idctl cluster init), its businesses, and
// starts the nodes.
func (c *cluster) setup(dir string, skews []time.Duration) error {
	nodes := len(skews)
	conn, _ := c.zk.Connect("idctl", sessionTimeout)
	for conn.State() != zk.StateHasSession {
		time.Sleep(time.Millisecond)
	}
	for _, name := range []string{simCluster, otherCluster} {
		if _, err := zkcluster.Init(conn, "/idgen", name, zkcluster.Settings{EpochMs: worker.DefaultEpochMs, IDCBits: idcBits, NodeBits: nodeBits}, nil); err != nil {
			conn.Close()
			return fmt.Errorf("cluster init %s: %w", name, err)
		}
		// idctl cluster init writes the incarnation marker with the meta.
		if _, err := clusterinc.Create(conn, "/idgen", name, nil, time.Now()); err != nil {
			conn.Close()
			return fmt.Errorf("cluster init %s: the incarnation marker: %w", name, err)
		}
	}
	conn.Close()
	// The operator's oldest backup: taken right after cluster init, before
	// any node claimed a slot (zk-restore-init restores it).
	c.initSnap = c.zk.Snapshot()
	for _, b := range []segment.Biz{
		{Name: bizSnowflake, Channel: segment.ChannelSnowflake, Fallback: true, Step: 1000},
		{Name: bizUnordered, Channel: segment.ChannelUnordered, Step: 200},
		{Name: bizCached, Channel: segment.ChannelOrdered, OrderedMode: segment.OrderedCached},
		{Name: bizGapless, Channel: segment.ChannelOrdered, OrderedMode: segment.OrderedGapless},
	} {
		if b.StartNum == 0 {
			b.StartNum = 1
		}
		if b.LowWaterPct == 0 {
			b.LowWaterPct = 20
		}
		b.Channels = []segment.Channel{b.Channel}
		if b.Channel == segment.ChannelSnowflake {
			b.Channels = []segment.Channel{segment.ChannelUnordered, segment.ChannelSnowflake}
		}
		if _, err := c.db.mem.CreateBiz(context.Background(), b); err != nil {
			return fmt.Errorf("create biz %s: %w", b.Name, err)
		}
	}
	for i := range nodes {
		d, err := os.MkdirTemp(dir, "node")
		if err != nil {
			return err
		}
		n := &node{c: c, idx: i, addr: fmt.Sprintf("10.0.0.%d:8888", i+1), cluster: simCluster, dir: d, clk: newClock(), mono: newClock()}
		n.clk.Set(skews[i])
		c.nodes = append(c.nodes, n)
		c.byAdr[n.addr] = n
	}
	d, err := os.MkdirTemp(dir, "intruder")
	if err != nil {
		return err
	}
	c.intruder = &node{c: c, idx: -1, addr: "10.0.1.1:8888", cluster: otherCluster, dir: d, clk: newClock(), mono: newClock()}
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		wg.Add(1)
		go func() { defer wg.Done(); c.restart(n) }()
	}
	wg.Wait()
	for _, n := range c.nodes {
		n.mu.Lock()
		up := n.up
		n.mu.Unlock()
		if !up {
			return fmt.Errorf("start: %s did not start within 10 s", n.addr)
		}
	}
	return nil
}

// shutdown stops every node (gracefully) and the killed incarnations.
func (c *cluster) shutdown() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		n.thaw()
		wg.Add(1)
		go func() {
			defer wg.Done()
			n.mu.Lock()
			n.up = false
			p := n.parts()
			n.mu.Unlock()
			p.close(true)
		}()
	}
	c.gmu.Lock()
	grave := c.grave
	c.grave = nil
	c.gmu.Unlock()
	for _, p := range grave {
		wg.Add(1)
		go func() { defer wg.Done(); p.close(false) }()
	}
	wg.Wait()
}

// recorder keeps the calls and the request ids answered.
type recorder struct {
	mu          sync.Mutex
	calls       []checker.Call
	rids        map[string]ridAnswer // gapless request id -> first answer
	replays     int
	replayDiffs []string
	// replaysAcrossFailover are not checked (see answered).
	replaysAcrossFailover int
}

type ridAnswer struct {
	server int // the MySQL server identity when answered
	subKey string
	count  int
	ranges [][2]int64
}

func (r *recorder) add(c checker.Call) {
	r.mu.Lock()
	r.calls = append(r.calls, c)
	r.mu.Unlock()
}

func (r *recorder) okCalls() []checker.Call {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]checker.Call(nil), r.calls...)
}

// answered records a gapless request id's answer. It returns false when
// the id was answered before (the call is a replay, checked here and kept
// out of the uniqueness check, which would count it twice).
func (r *recorder) answered(rid string, a ridAnswer, call string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.rids == nil {
		r.rids = map[string]ridAnswer{}
	}
	prev, ok := r.rids[rid]
	if !ok {
		r.rids[rid] = a
		return true
	}
	if prev.server != a.server {
		// A lossy failover in between may have lost the stored id: a
		// fresh range is a gap then, not a violation.
		r.replaysAcrossFailover++
		return false
	}
	r.replays++
	if fmt.Sprint(prev.ranges) != fmt.Sprint(a.ranges) {
		r.replayDiffs = append(r.replayDiffs, fmt.Sprintf("request id %s first answered %v, replayed %v (%s)", rid, prev.ranges, a.ranges, call))
	}
	return false
}

// pick returns a previously answered gapless request id (for a replay).
func (r *recorder) pick(rng *rand.Rand) (string, ridAnswer, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.rids) == 0 {
		return "", ridAnswer{}, false
	}
	keys := make([]string, 0, len(r.rids))
	for k := range r.rids {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	k := keys[rng.IntN(len(keys))]
	return k, r.rids[k], true
}
