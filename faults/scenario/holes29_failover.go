package scenario

import (
	"strconv"
	"syscall"
	"time"

	"github.com/idgen/idgen/faults/checker"
	"github.com/idgen/idgen/faults/harness"
)

// The real-server scenario of issue 29's "What to build" 4: an async
// failover while one node is paused past its ZooKeeper session (hole c:
// barrier membership was "has an ephemeral acknowledgement").

const (
	// pausedStep is the UNORDERED step, and the nodes' --max-step: large
	// enough that n1 holds reserved IDs in memory whenever it is stopped
	// (a segment lasts under a second under the suite's load, and the
	// next one is loaded ahead; with replStep's 50 a call of up to 64 IDs
	// often finds it empty), and fixed: with the adaptive step a segment
	// n0 or n2 loaded ahead before the lag could reach above n1's lost
	// ones, its row then covered them on the promoted replica, and the
	// control did not fail (seed 1).
	pausedStep = 5000
	// pausedLag is how long the replica lags before the victim is
	// paused: the victim reserves segments and ORDERED ranges on the
	// primary that the replica has not applied, and keeps some in memory.
	pausedLag = 3 * time.Second
	// pausedFor is how long the victim stays SIGSTOPped: past its session
	// (3 s), across the lossy failover and the others' barrier round.
	pausedFor = 12 * time.Second
	// pausedKillAfter is when, into the pause, the primary is killed: the
	// victim's session has expired by then (its acknowledgement znode is
	// gone), so a barrier that counts members by that znode does not wait
	// for it.
	pausedKillAfter = 6 * time.Second
)

// asyncFailoverPaused: P and an async R behind the VIP, three nodes on
// it under ORDERED, UNORDERED and SNOWFLAKE load, step pausedStep. R lags
// (SQL thread stopped; n0's and n2's UNORDERED callers held from then to
// the failover) for pausedLag, then n1 is SIGSTOPped for
// pausedFor. pausedKillAfter into the pause (n1's session expired), P is
// SIGKILLed and R promoted as it is (lossy: the lag's reservations, some
// of them in n1's memory, are gone) and the VIP moved. n1 resumes under
// load: it must not answer from what it reserved on the lost primary
// after the others reserved the same numbers again. 0 duplicates and 0
// ORDERED order violations expected. neg: the cross-node replication guard
// off on every node (IDGEN_FAULT_NO_REPLICATION_GUARD=1): the others
// reserve the lost numbers again and n1 too answers from them.
func asyncFailoverPaused(neg bool) func(*Run) error {
	return func(r *Run) error {
		rp, err := startPair(r, false)
		defer rp.close()
		if err != nil {
			return err
		}
		o := ClusterOpts{Step: pausedStep, MySQLBase: "root@tcp(" + rp.VIP.Addr + ")/",
			Args: []string{"--max-step", strconv.Itoa(pausedStep)}}
		if neg {
			o.setFault("IDGEN_FAULT_NO_REPLICATION_GUARD=1", firstNodes(3)...)
			r.negOrder = true
		}
		c, err := std(r, o)
		if err != nil {
			return err
		}
		if err := rp.R.WaitReplicated(rp.P, 30*time.Second); err != nil {
			return err
		}
		victim := c.Nodes[1]
		// n0's and n2's UNORDERED callers are held from the lag to the
		// failover: in the lag only n1 reserves UNORDERED segments, so
		// what n1 holds in memory is above anything the others remember,
		// and their own raise after the failover (to what they remember)
		// does not cover it; only the cross-node guard (the ledger) does.
		hold := harness.NewHold()
		cs := r.callers(c.Active())
		for i := range cs {
			if cs[i].Channel == harness.ChUnordered && cs[i].Node != victim {
				cs[i].Hold = hold
			}
		}
		r.from = time.Now()
		r.load = harness.StartLoad(cs, 5*time.Millisecond, r.seed)
		r.Sleep(3 * time.Second)
		hold.Pause()
		if err := rp.R.Exec("STOP SLAVE SQL_THREAD"); err != nil {
			hold.Resume()
			return err
		}
		r.Note("replica lags: SQL thread stopped %v into the load; n0's and n2's UNORDERED callers held", time.Since(r.from).Round(100*time.Millisecond))
		r.Sleep(pausedLag)
		victim.Signal(syscall.SIGSTOP)
		tStop := time.Now()
		r.Note("SIGSTOP n1 for %v (session 3 s)", pausedFor)
		sleepUntil(tStop.Add(pausedKillAfter))
		tKill := time.Now()
		rp.P.Kill()
		st, err := rp.R.SlaveStatus()
		if err != nil {
			victim.Signal(syscall.SIGCONT)
			hold.Resume()
			return err
		}
		applied, _ := rp.R.Var("gtid_slave_pos")
		received := st["Gtid_IO_Pos"]
		if err := rp.R.Promote(); err != nil {
			victim.Signal(syscall.SIGCONT)
			hold.Resume()
			return err
		}
		rp.VIP.SwitchTarget(rp.R.Addr())
		fo := time.Since(tKill)
		hold.Resume()
		r.Note("primary SIGKILLed %v into n1's pause; replica promoted as it was (received %s, applied %s: %d transactions lost); VIP switched: failover %v; n0's and n2's UNORDERED callers resumed",
			tKill.Sub(tStop).Round(100*time.Millisecond), received, applied, harness.GTIDSeq(received)-harness.GTIDSeq(applied),
			fo.Round(time.Millisecond))
		sleepUntil(tStop.Add(pausedFor))
		tCont := time.Now()
		victim.Signal(syscall.SIGCONT)
		r.Note("SIGCONT n1")
		r.Sleep(15 * time.Second)
		r.StopLoad()
		r.Note("n1 after the SIGCONT: %s; refusals %s", gapsNote(r.calls, tCont, r.to, victim.Name), refusals(r.load0(tCont), victim.Name))
		r.Note("%s", gapsNote(r.calls, r.from, r.to, ""))
		r.Note("node log lines since the kill on the barrier, regressions, raised rows: %s",
			logMatches(c.Active(), tKill, "barrier", "regress", "raise", "gate"))
		return nil
	}
}

// load0 returns the recorded calls that started at or after t.
func (r *Run) load0(t time.Time) []checker.Call {
	var out []checker.Call
	for i := range r.calls {
		if !r.calls[i].Start.Before(t) {
			out = append(out, r.calls[i])
		}
	}
	return out
}
