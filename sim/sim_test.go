package sim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/idgen/idgen/faults/checker"
	"github.com/idgen/idgen/internal/zkfake"
	"github.com/idgen/idgen/segment"
	"github.com/idgen/idgen/segment/mysqlstore"
)

// The checker the simulator uses catches a planted duplicate and a
// planted real-time order violation, and the replay check a request id
// answered with two ranges.
func TestCheckerCatchesPlantedViolations(t *testing.T) {
	t0 := time.Now()
	rec := &recorder{}
	rec.add(checker.Call{Caller: "a", Biz: bizUnordered, Channel: checker.Unordered, Ranges: [][2]int64{{10, 20}}, Start: t0, End: t0.Add(time.Millisecond)})
	rec.add(checker.Call{Caller: "b", Biz: bizUnordered, Channel: checker.Unordered, Ranges: [][2]int64{{20, 21}}, Start: t0, End: t0.Add(time.Millisecond)})
	rec.add(checker.Call{Caller: "a", Biz: bizGapless, SubKey: "k", Channel: checker.Ordered, Ranges: [][2]int64{{5, 5}}, Start: t0, End: t0.Add(time.Millisecond)})
	rec.add(checker.Call{Caller: "b", Biz: bizGapless, SubKey: "k", Channel: checker.Ordered, Ranges: [][2]int64{{4, 4}}, Start: t0.Add(2 * time.Millisecond), End: t0.Add(3 * time.Millisecond)})
	r := checker.Check(rec.okCalls(), checker.Options{Layout: checker.DefaultLayout})
	if r.Duplicates != 1 || r.Order != 1 {
		t.Fatalf("duplicates %d, order %d; want 1 and 1:\n%s", r.Duplicates, r.Order, r.Details())
	}
	if !rec.answered("r1", ridAnswer{ranges: [][2]int64{{1, 2}}}, "first") {
		t.Fatal("a new request id counted as a replay")
	}
	if rec.answered("r1", ridAnswer{ranges: [][2]int64{{1, 2}}}, "same") || len(rec.replayDiffs) != 0 {
		t.Fatalf("a faithful replay: %v", rec.replayDiffs)
	}
	rec.answered("r1", ridAnswer{ranges: [][2]int64{{3, 4}}}, "other")
	if len(rec.replayDiffs) != 1 || rec.replays != 2 {
		t.Fatalf("replays %d, differing %v; want 2 and one", rec.replays, rec.replayDiffs)
	}
}

// A seed's schedule is a function of the seed alone (what --seed N
// replays).
func TestScheduleIsDrawnFromTheSeed(t *testing.T) {
	a, sa := draw(7, 3, 3*time.Second, defaultMix)
	b, sb := draw(7, 3, 3*time.Second, defaultMix)
	c, _ := draw(8, 3, 3*time.Second, defaultMix)
	if !reflect.DeepEqual(a, b) || !reflect.DeepEqual(sa, sb) {
		t.Fatalf("seed 7 drew two schedules:\n%v\n%v", a, b)
	}
	if reflect.DeepEqual(a, c) {
		t.Fatalf("seeds 7 and 8 drew the same schedule %v", a)
	}
	for _, e := range a {
		if e.at < 0 || e.at >= 3*time.Second || e.node < 0 || e.node >= 3 {
			t.Fatalf("event out of bounds: %v", e)
		}
	}
}

func TestUnknownControlIsRefused(t *testing.T) {
	r := Run(1, Options{Control: "IDGEN_FAULT_NOPE"})
	if r.Err == nil || !r.Failed() {
		t.Fatalf("unknown control ran: %v", r)
	}
}

// The negative controls: with a guard switched off, the simulator finds a
// violation within a few seeds, and the seed that found it passes on the
// real code with the same fault mix. Interleavings vary between runs, so
// each control tries up to 20 seeds (it usually needs 1 to 6).
func TestControlsAreFound(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the simulator (seconds per seed)")
	}
	for _, tc := range []struct {
		control, mix string
		ordered      bool // the violation must be on ORDERED
		// env: the switch is read by a package from the environment, so
		// only a -tags faultinject build reopens the hole.
		env bool
	}{
		{"IDGEN_FAULT_ORDERED_NO_LEASE_WAIT", "mix:pause,zk-partition,zk-expire", true, false},
		{"IDGEN_FAULT_IGNORE_NOT_BEFORE", "mix:sigterm-clockback,kill-clockback,kill,clock-step", false, false},
		// The restore bound of the worker slots (zk-restore-slot; seeds 1,
		// 2 and 3 of 1-3).
		{"IDGEN_FAULT_IGNORE_RESTORE", "mix:zk-restore-slot", false, false},
		// The guard switched off must reopen the hole for ORDERED too
		// (before, a disabled guard as the gate refused ORDERED for good).
		{"IDGEN_FAULT_NO_REPLICATION_GUARD", "mix:db-failover,pause", true, false},
		// Hole d: the barrier keeps the generation it acknowledged across a
		// ZooKeeper restore (zk-restore-gen; seeds 2, 3 and 4 of 1-5).
		{"IDGEN_FAULT_BARRIER_NO_RESTORE_RESET", "mix:zk-restore-gen,pause", true, true},
		// Issue 31 item 4: takers ignoring the owners' store leases
		// (seeds 3, 4 and 12 of 1-20).
		{"IDGEN_FAULT_ORDERED_IGNORE_STORE_LEASE", "mix:zk-partition,zk-expire,pause", true, true},
	} {
		if tc.env && !faultInjectBuild {
			// The switch is read by the packages in -tags faultinject
			// builds only: ./build.sh test runs this test again with the
			// tag (go test -tags faultinject -run TestControlsAreFound ./sim/).
			continue
		}
		t.Run(tc.control, func(t *testing.T) {
			t.Setenv(tc.control, "1")
			// Most controls are found in the first few seeds; 40 leaves
			// room for the ones whose violation needs a timing the seed
			// only sometimes gives on a busy machine (the store-lease
			// control was found in seeds 3, 4, 9 and 12 of 1-20 in
			// different runs), and costs time only when it is not found.
			var found *Result
			for seed := uint64(1); seed <= 40 && found == nil; seed++ {
				r := Run(seed, Options{Control: tc.control})
				if r.Err != nil && !r.Overloaded() {
					t.Fatal(r)
				}
				t.Logf("%s", firstLine(r.String()))
				if r.Unsafe() && (!tc.ordered || r.Report.Order > 0 || strings.Contains(r.String(), "duplicate: ordered")) {
					found = r
				}
			}
			if found == nil {
				t.Fatal("the control found no violation in 40 seeds: the simulator no longer reaches the guard")
			}
			os.Unsetenv(tc.control)
			if r := Run(found.Seed, Options{Control: tc.mix}); r.Unsafe() {
				t.Fatalf("seed %d is unsafe without the control too:\n%s", found.Seed, r)
			}
		})
	}
}

// A seed of the default mix passes on the real code (the run ./build.sh
// test makes with more seeds).
func TestDefaultSeedPasses(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the simulator")
	}
	r := Run(1, Options{})
	if r.Failed() && !(r.Overloaded() && !r.Unsafe()) {
		t.Fatal(r)
	}
	if r.Report.OK == 0 || r.Report.ByChannel[checker.Ordered] == 0 || r.Report.ByChannel[checker.Snowflake] == 0 || r.Report.ByChannel[checker.Unordered] == 0 {
		t.Fatalf("the load did not reach every channel: %+v", r.Report.ByChannel)
	}
}

// TestKilledPredecessorIsALimit replays seed 1120 of the default mix: a
// node is killed (after another node's stalled hand-off) and restarted
// under the same name, then MySQL fails over 643 ms behind, losing what
// the killed process answered last. Nothing remembers those answers, so
// the repeats are the documented limit, and the barrier must say so: it
// waits out the killed process's bound and counts it gone. Before, the
// restarted process's acknowledgement overwrote the killed one's member
// record, the gates opened at once with every member "acknowledged", and
// the seed was unsafe (the repeats also came only after the load had
// stopped: the probe's answers are now checked too). Under -tags
// faultinject, IDGEN_FAULT_MEMBER_PER_NODE=1 must make it unsafe again
// (3 of 3 and 5 of 5 replays when it was written; one in three is asked).
func TestKilledPredecessorIsALimit(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the simulator")
	}
	r := Run(1120, Options{})
	if r.Unsafe() || (r.Err != nil && !r.Overloaded()) {
		t.Fatal(r)
	}
	t.Logf("%s", firstLine(r.String()))
	if !faultInjectBuild {
		return
	}
	t.Setenv("IDGEN_FAULT_MEMBER_PER_NODE", "1")
	for range 3 {
		r := Run(1120, Options{})
		t.Logf("IDGEN_FAULT_MEMBER_PER_NODE=1: %s", firstLine(r.String()))
		if r.Unsafe() {
			return
		}
	}
	t.Fatal("IDGEN_FAULT_MEMBER_PER_NODE=1: seed 1120 was not unsafe in 3 runs: the simulator no longer reaches the member records")
}

func firstLine(s string) string {
	for i, c := range s {
		if c == '\n' {
			return s[:i]
		}
	}
	return fmt.Sprint(s)
}

// limitCalls returns the limit tests' clock (ms after now) and their
// ORDERED call of node (incarnation inc) answered lo..hi at endMs.
func limitCalls() (func(ms int) time.Time, func(node string, inc, endMs int, lo, hi int64) checker.Call) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	call := func(node string, inc, endMs int, lo, hi int64) checker.Call {
		return checker.Call{Caller: node, Node: node, Inc: inc, Biz: bizCached, SubKey: "k", Channel: checker.Ordered,
			Ranges: [][2]int64{{lo, hi}}, Start: at(endMs - 1), End: at(endMs)}
	}
	return at, call
}

// The documented limit explains a violation only when its earlier answer's
// node (that incarnation) was counted gone by a barrier, and a failover
// happened, between the two answers; anything else stays unsafe (also a
// failover before the earlier answer, whether or not its process had seen
// the new server yet).
func TestLimitExplainsOnlyItsOwnViolations(t *testing.T) {
	at, call := limitCalls()
	check := func(calls ...checker.Call) *checker.Report {
		return checker.Check(calls, checker.Options{Layout: checker.DefaultLayout})
	}
	repeat := check(call("10.0.0.3:8888", 1, 10, 5, 9), call("10.0.0.1:8888", 1, 100, 7, 8))
	if repeat.Duplicates == 0 || len(repeat.Pairs) != repeat.Duplicates+repeat.Order {
		t.Fatalf("pairs %d for %d duplicates and %d order violations", len(repeat.Pairs), repeat.Duplicates, repeat.Order)
	}
	for _, tc := range []struct {
		name      string
		failover  int
		goneAddr  string
		goneInc   int
		goneAt    int
		seen      int // when 10.0.0.3#1 first ran a statement on the new server (0: never)
		explained bool
	}{
		{"failover, then the earlier node counted gone", 20, "10.0.0.3:8888", 1, 30, 0, true},
		{"failover, then the earlier node counted gone, although it saw the new server", 20, "10.0.0.3:8888", 1, 30, 25, true},
		{"failover before the earlier answer, whose process had not seen it", 5, "10.0.0.3:8888", 1, 30, 0, false},
		{"failover before the earlier answer, whose process saw the new server after answering", 5, "10.0.0.3:8888", 1, 30, 11, false},
		{"failover before the earlier answer, whose process had seen the new server", 5, "10.0.0.3:8888", 1, 30, 7, false},
		{"failover after the repeat", 150, "10.0.0.3:8888", 1, 30, 0, false},
		{"another node counted gone", 20, "10.0.0.2:8888", 1, 30, 0, false},
		{"another incarnation counted gone", 20, "10.0.0.3:8888", 2, 30, 0, false},
		{"counted gone after the repeat", 20, "10.0.0.3:8888", 1, 200, 0, false},
		{"failover before the earlier answer, counted gone after the repeat", 5, "10.0.0.3:8888", 1, 200, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l limitEvents
			l.statementOn(at(1), "10.0.0.3:8888", 1, 1)
			l.statementOn(at(1), "10.0.0.1:8888", 1, 1)
			l.statementOn(at(1), "10.0.0.3:8888", 2, 2) // another incarnation's statements say nothing of this one
			if tc.seen != 0 {
				l.statementOn(at(tc.seen), "10.0.0.3:8888", 1, 2)
			}
			l.failover(at(tc.failover), 2)
			l.memberGone(at(tc.goneAt), tc.goneAddr, tc.goneInc)
			if got := l.explains(repeat); got != tc.explained {
				t.Fatalf("explains = %v, want %v", got, tc.explained)
			}
		})
	}
	// A snowflake repeat is never the ORDERED limit.
	var l limitEvents
	l.failover(at(20), 2)
	l.memberGone(at(30), "10.0.0.3:8888", 1)
	sf := check(checker.Call{Caller: "a", Node: "10.0.0.3:8888", Inc: 1, Biz: bizUnordered, Channel: checker.Unordered, Ranges: [][2]int64{{1, 2}}, Start: at(9), End: at(10)},
		checker.Call{Caller: "b", Node: "10.0.0.1:8888", Inc: 1, Biz: bizUnordered, Channel: checker.Unordered, Ranges: [][2]int64{{2, 3}}, Start: at(99), End: at(100)})
	if l.explains(sf) {
		t.Fatal("an UNORDERED repeat explained by the ORDERED limit")
	}
}

// A failed run says what the limit's verdict rested on: the failovers and
// members counted gone it saw, and for a violation it does not explain,
// which evidence is missing (seed 1120 failed 2 of about 80 replays on a
// loaded machine, and the report alone could not tell why).
func TestLimitEvidenceNamesWhatIsMissing(t *testing.T) {
	at, call := limitCalls()
	repeat := checker.Check([]checker.Call{call("10.0.0.3:8888", 1, 10, 5, 9), call("10.0.0.1:8888", 1, 100, 7, 8)},
		checker.Options{Layout: checker.DefaultLayout})
	has := func(lines []string, sub string) bool {
		for _, l := range lines {
			if strings.Contains(l, sub) {
				return true
			}
		}
		return false
	}
	for _, tc := range []struct {
		name     string
		failover int
		goneInc  int
		want     string // "" : explained, no "not the limit" line
	}{
		{"explained", 20, 1, ""},
		{"no failover between", 5, 1, "no failover between the two answers; its first statement on mysql-2 at "},
		{"another incarnation counted gone", 20, 2, "10.0.0.3:8888#1 not counted gone between the two answers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var l limitEvents
			l.statementOn(at(7), "10.0.0.3:8888", 1, 2) // it had seen the new server before answering
			l.failover(at(tc.failover), 2)
			l.memberGone(at(30), "10.0.0.3:8888", tc.goneInc)
			ev := l.evidence(repeat)
			if !has(ev, "failover to mysql-2 at ") || !has(ev, fmt.Sprintf("counted gone: 10.0.0.3:8888#%d at ", tc.goneInc)) {
				t.Fatalf("the events are not listed: %q", ev)
			}
			if tc.want == "" {
				if has(ev, "not the limit") || !l.explains(repeat) {
					t.Fatalf("explained, yet: %q", ev)
				}
				return
			}
			if !has(ev, "not the limit: duplicate") || !has(ev, tc.want) || l.explains(repeat) {
				t.Fatalf("want a line with %q: %q", tc.want, ev)
			}
		})
	}
	r := Result{Seed: 1, Report: repeat, LimitEvidence: []string{"failover at x"}}
	if !strings.Contains(r.String(), "\n  limit evidence: failover at x") {
		t.Fatalf("the verdict does not print the evidence:\n%s", r.String())
	}
}

// The simulated database runs the real binding rule: the first cluster
// binds it, a node of another cluster (or of another cluster of the same
// name) is refused with mysqlstore.ErrOtherCluster, and a replica promoted
// by a failover keeps the binding it copied.
func TestDatabaseBindsOneCluster(t *testing.T) {
	d := newDB(1, false)
	if err := d.bindCluster(simCluster, 1000); err != nil {
		t.Fatalf("first bind: %v", err)
	}
	if err := d.bindCluster(simCluster, 1000); err != nil {
		t.Fatalf("the bound cluster's next node: %v", err)
	}
	for _, other := range []struct {
		name    string
		created int64
	}{{otherCluster, 1000}, {simCluster, 2000}} {
		if err := d.bindCluster(other.name, other.created); !errors.Is(err, mysqlstore.ErrOtherCluster) {
			t.Fatalf("cluster %q created %d: %v; want ErrOtherCluster", other.name, other.created, err)
		}
	}
	d.failover(d.snapshot())
	if err := d.bindCluster(otherCluster, 1000); !errors.Is(err, mysqlstore.ErrOtherCluster) {
		t.Fatalf("after a failover: %v; want ErrOtherCluster", err)
	}
}

// vm-freeze stops the node's monotonic clock for the freeze, while its
// wall clock goes on (ORDERED's leases read the monotonic one).
func TestFreezeStopsTheMonotonicClock(t *testing.T) {
	c := &cluster{zk: zkfake.New()}
	defer c.zk.Close()
	n := &node{c: c, addr: "10.0.0.1:8888", clk: newClock(), mono: newClock()}
	w0, m0 := n.clk.Now(), n.mono.Now()
	n.freeze(100 * time.Millisecond)
	wall, mono := n.clk.Now().Sub(w0), n.mono.Now().Sub(m0)
	if wall < 100*time.Millisecond || mono > wall-90*time.Millisecond {
		t.Fatalf("after a freeze of 100ms the wall clock moved %v, the monotonic clock %v; want at least 100ms and about 0", wall, mono)
	}
}

// db-cert: a refused commit returns a retryable error and stores nothing;
// the conflicts run out and the next commit goes through.
func TestCertConflictStoresNothing(t *testing.T) {
	d := newDB(1, false)
	s := &nodeDB{Store: d.mem, d: d, n: &node{}}
	ctx := context.Background()
	d.conflicts.Store(1)
	if err := s.Claim(ctx, 3, 1, "a"); !errors.Is(err, segment.ErrUnavailable) {
		t.Fatalf("claim under a certification conflict: %v; want ErrUnavailable", err)
	}
	if e, claimed := d.ord.Epoch(3); claimed {
		t.Fatalf("the refused claim stored epoch %d", e)
	}
	if err := s.Claim(ctx, 3, 1, "a"); err != nil {
		t.Fatalf("claim after the conflict: %v", err)
	}
	if e, _ := d.ord.Epoch(3); e != 1 {
		t.Fatalf("epoch %d, want 1", e)
	}
}

// The composite kinds expand into their parts. zk-restore-gen, in order: the restore's copy
// predates both switchovers, and the failover's replica position lies
// after the restore, so dropDoubleFaults keeps every part (a restore in a
// failover's loss window would be a double fault).
func TestCompositesExpand(t *testing.T) {
	e := event{at: time.Second, kind: kRestoreGen, node: 2, d: 900 * time.Millisecond}
	parts := dropDoubleFaults(expand(e, 3))
	var kinds []kind
	for _, p := range parts {
		kinds = append(kinds, p.kind)
	}
	want := []kind{kSwitchover, kSwitchover, kRestoreEpoch, kFailover, kPause, kQuiet}
	if !reflect.DeepEqual(kinds, want) {
		t.Fatalf("parts %v, want %v", parts, want)
	}
	restore, failover := parts[2], parts[3]
	if copyAt := restore.at - restore.d; copyAt >= parts[0].at {
		t.Errorf("the restore's copy (at %v) does not predate the first switchover (at %v)", copyAt, parts[0].at)
	}
	if replica := failover.at - failover.d - 100*time.Millisecond; replica <= restore.at {
		t.Errorf("the failover's replica position %v is not after the restore at %v", replica, restore.at)
	}
	if failover.d != e.d {
		t.Errorf("the failover lags %v, want the drawn %v", failover.d, e.d)
	}
	if got := expand(event{kind: kPause}, 3); len(got) != 1 || got[0].kind != kPause {
		t.Errorf("a plain kind expanded into %v", got)
	}
	// zk-restore-slot: the restore's copy predates the first kill (so the
	// slot B takes then goes back), and A, restarted with its clock back,
	// is another node than B.
	slot := expand(event{at: time.Second, kind: kRestoreSlot, node: 2}, 3)
	if len(slot) != 5 || slot[0].kind != kKill || slot[1].kind != kRestoreEpoch || slot[3].kind != kKillBack {
		t.Fatalf("zk-restore-slot expanded into %v", slot)
	}
	if copyAt := slot[1].at - slot[1].d; copyAt >= slot[0].at {
		t.Errorf("the restore's copy (at %v) does not predate the first kill (at %v)", copyAt, slot[0].at)
	}
	if slot[3].node == slot[0].node || slot[3].node != 0 {
		t.Errorf("the clock-back restart is on node %d, B is node %d; want node 0", slot[3].node, slot[0].node)
	}
}
