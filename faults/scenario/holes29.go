package scenario

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/idgen/idgen/faults/checker"
	"github.com/idgen/idgen/faults/harness"
)

// The real-server scenarios of issue 29's holes j (a paused owner holding
// its shard's fence row) and k (two clusters on one database), each with
// its negative control.

const (
	// fencePause is how long the owner stays frozen inside its persist.
	fencePause = 30 * time.Second
	// fenceStall is the stall after the fence UPDATE in which the suite
	// SIGSTOPs the node (IDGEN_FAULT_ORDERED_PERSIST_STALL).
	fenceStall = 3 * time.Second
	// clusterGapBound is the most the first cluster's hot keys may go
	// without an answer while a second cluster's node starts on its
	// database.
	clusterGapBound = 5 * time.Second
)

// persistStalled is the log line of IDGEN_FAULT_ORDERED_PERSIST_STALL's
// stall (ordered/mysqlstore/fault_faultinject.go).
const persistStalled = "faultinject: persist stalled after the fence"

// persistStallFile returns the path of the scenario's
// IDGEN_FAULT_ORDERED_PERSIST_STALL file, absent (the hook disarmed) until
// armPersistStall writes it.
func persistStallFile(r *Run) (string, error) {
	dir := filepath.Join(r.Env.WorkDir, r.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	arm := filepath.Join(dir, "persist-stall")
	_ = os.Remove(arm)
	return arm, nil
}

// armPersistStall returns the trigger (for atStall) that arms the hook:
// the process's next persist of shard stalls for d after its fence UPDATE,
// inside its transaction; with every, each of its persists of shard does
// until the file is removed.
func armPersistStall(arm string, shard int, d time.Duration, every bool) func() error {
	line := fmt.Sprintf("%d %s", shard, d)
	if every {
		line += " every"
	}
	return func() error { return os.WriteFile(arm, []byte(line+"\n"), 0o644) }
}

// hotGaps records a violation for each ORDERED business whose hot keys
// went longer than bound without an answer, and returns the longest.
func (s *ordSetup) hotGaps(r *Run, bound time.Duration, why string) time.Duration {
	var worst time.Duration
	for _, biz := range []string{bizGapless, bizCached} {
		out := checker.KeyOutage(r.calls, biz, keyList(s.hotKeys(biz)), r.from, r.to)
		worst = max(worst, out.Len)
		if out.Len > bound {
			r.Violation("%s (%s) hot keys went %v without an answer (%s..%s), bound %v: %s", biz, modeOf(biz),
				out.Len.Round(time.Millisecond), clock(out.From), clock(out.To), bound, why)
		}
	}
	return worst
}

// orderedFenceRowPause (hole j): the hot shard's owner A stalls a persist
// after its fence UPDATE (IDGEN_FAULT_ORDERED_PERSIST_STALL, armed for the
// hot shard once ownership settled) and is SIGSTOPped there, its
// transaction open on the shard's fence row, for fencePause; then
// SIGCONTed. The server ends A's idle session after the store's session
// idle limit (internal/mysqldb.SessionIdleLimit: 5 s with the 2 s store
// timeout), so the others' Claim gets the row and the hot keys' outage
// stays well below the pause (bound: half of it). neg
// (IDGEN_FAULT_NO_SESSION_IDLE_LIMIT=1 on every node):
// the sessions keep the server's wait_timeout (8 h), A's transaction holds
// the row for the whole pause, every Claim fails on the lock: the outage
// is the pause, above the bound.
func orderedFenceRowPause(neg bool) func(*Run) error {
	return func(r *Run) error {
		arm, err := persistStallFile(r)
		if err != nil {
			return err
		}
		o := ordOpts{Victim: 1}
		o.setFault("IDGEN_FAULT_ORDERED_PERSIST_STALL="+arm, 1)
		if neg {
			r.negViolation = true
			o.setFault("IDGEN_FAULT_NO_SESSION_IDLE_LIMIT=1", firstNodes(3)...)
		}
		s, err := ordCluster(r, o)
		if err != nil {
			return err
		}
		a := s.victim
		st, err := s.stopInStall(r, armPersistStall(arm, s.shard, fenceStall, false), persistStalled, 10*time.Second)
		if err != nil {
			return err
		}
		offs, stop := st.offs, st.stopped
		r.Note("%s (owner of shard %d) stalled a persist after its fence UPDATE; SIGSTOP %s for %v", a.Name, s.shard, a.Name, fencePause)
		b, werr := s.waitOwner(s.others(), []*harness.Node{a}, fencePause-time.Second)
		if werr == nil {
			r.Note("shard %d leased (ZooKeeper) by %s %v after the SIGSTOP; served once its Claim gets the fence row", s.shard, b.Name, time.Since(stop).Round(10*time.Millisecond))
		} else {
			r.Note("shard %d not taken over while %s was stopped: %v", s.shard, a.Name, werr)
			b = s.others()[0]
		}
		sleepUntil(stop.Add(fencePause))
		a.Signal(syscall.SIGCONT)
		r.Note("SIGCONT %s", a.Name)
		s.finish(r, b, 7*time.Second, offs)
		worst := s.hotGaps(r, fencePause/2, "a paused owner's open transaction kept its shard's fence row from the others")
		r.Note("hot keys' longest outage %v (bound %v, pause %v)", worst.Round(time.Millisecond), fencePause/2, fencePause)
		return nil
	}
}

// twoClustersOneDB (hole k): under ORDERED load on cluster 1, a node of a
// second cluster (created with `idctl cluster init` under another name on
// the same ZooKeeper) starts with cluster 1's database. It must be refused
// at start (exit non-zero, its log naming the fix: a database per
// cluster), and cluster 1's hot keys keep being served (gap bound). neg
// (IDGEN_FAULT_NO_CLUSTER_BINDING=1 on the intruder): it starts, owns all
// 64 shards of its one-node cluster and claims them in the shared
// ordered_shard table, raising their epochs under cluster 1's owners:
// their persists are fenced and the gapless business shows holes no
// failed call explains (the violation the control fails by; the hot
// keys' outage stayed below the bound in the runs).
func twoClustersOneDB(neg bool) func(*Run) error {
	return func(r *Run) error {
		s, err := ordCluster(r, ordOpts{Victim: 1})
		if err != nil {
			return err
		}
		c := s.c
		// The intruder: cluster 1's flags (minus the addresses NewNode
		// adds) with another cluster name and directory.
		name := c.Name + "_b"
		dir := filepath.Join(r.Env.WorkDir, r.Name)
		nd := filepath.Join(dir, "x0")
		if err := os.MkdirAll(nd, 0o755); err != nil {
			return err
		}
		args := append([]string(nil), c.Nodes[0].Args[6:]...)
		for i := 0; i+1 < len(args); i++ {
			switch args[i] {
			case "--cluster":
				args[i+1] = name
			case "--properties-dir", "--data-dir":
				args[i+1] = nd
			}
		}
		if err := r.initCluster(name, args); err != nil {
			return err
		}
		bin, env := r.Env.Bin, []string(nil)
		if neg {
			r.negViolation = true
			bin, env = r.Env.BinFI, []string{"IDGEN_FAULT_NO_CLUSTER_BINDING=1"}
		}
		x, err := harness.NewNode("x0", bin, dir, args, env)
		if err != nil {
			return err
		}
		s.startLoad(r)
		r.Sleep(3 * time.Second)
		offs := s.logOffsets()
		if err := x.StartNoWait(); err != nil {
			return err
		}
		start := time.Now()
		r.Note("node x0 of cluster %s started on cluster %s's database", name, c.Name)
		if !neg {
			if !x.WaitExit(30 * time.Second) {
				x.Kill()
				r.Violation("x0 of cluster %s still runs 30 s after its start on cluster %s's database", name, c.Name)
			} else {
				code := x.ExitCode()
				fix := x.LogLines(0, "give each cluster its own database")
				r.Note("x0 exited %v after its start, code %d; %d log lines name the fix", time.Since(start).Round(10*time.Millisecond), code, len(fix))
				if code == 0 {
					r.Violation("x0 exited 0 after its refusal")
				}
				if len(fix) == 0 || !strings.Contains(fix[0], "belongs to cluster") {
					r.Violation("x0's log does not name the fix (%q)", x.LastLogLine())
				}
			}
			r.Sleep(5 * time.Second)
		} else {
			if err := x.WaitStarted(30 * time.Second); err != nil {
				x.Kill()
				return fmt.Errorf("x0 (binding check skipped) did not start: %w", err)
			}
			r.Note("x0 started %v after its start, binding not checked", time.Since(start).Round(10*time.Millisecond))
			r.Sleep(12 * time.Second)
			if own, err := ownersOf(x); err == nil {
				r.Note("x0 sees itself owning the hot shard %d: %v", s.shard, own[s.shard] == x.RPCAddr)
			}
			x.Kill()
			r.Note("SIGKILL x0")
		}
		// finish, keeping the gapless business's holes: a hole no failed
		// call explains is a violation (x0's claims fence cluster 1's
		// owners mid-persist in the control).
		assertGapless(r, s.finish(r, s.others()[0], 5*time.Second, offs))
		fenced := 0
		for _, n := range c.Active() {
			fenced += len(n.LogLines(offs[n], "epoch changed"))
		}
		r.Note("cluster %s's log lines naming a changed epoch since x0 started: %d", c.Name, fenced)
		if fenced > 0 {
			// Another cluster's claims fenced this cluster's owners in
			// the shared ordered_shard table: what one database per
			// cluster prevents. Since owners refuse before they allocate
			// during a lease wait, the fencing no longer leaves gapless
			// holes (the control's first signal); it still costs every
			// fenced shard a takeover and a lease wait.
			r.Violation("a second cluster's node fenced this cluster's ORDERED owners: %d 'epoch changed' log lines", fenced)
		}
		worst := s.hotGaps(r, clusterGapBound, "a second cluster's node on the first cluster's database")
		r.Note("hot keys' longest outage %v (bound %v)", worst.Round(time.Millisecond), clusterGapBound)
		return nil
	}
}
