package scenario

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/idgen/idgen/faults/harness"
)

// The real-server scenario of issue 29's hole h: a single ZooKeeper server
// restored from a copy of its data dir, with a fresh node starting first.

const (
	// freshOutage is the nodes' --outage-tolerance in
	// zk-restore-fresh-first: their lead (how far ahead marks are
	// written) is 12 s + heartbeat 0.5 s + 2 s margin = 14.5 s. A node cut
	// off from ZooKeeper keeps serving up to its mark, so the lead must
	// outlast the restore (one JVM stopped and started, 3-5 s here), the
	// restored sessions' expiry (3 s) and the fresh node's start: with
	// the suite's usual 2 s every old node would have stopped before the
	// fresh node served, and even today's code could not repeat an ID.
	freshOutage = "12s"
	// freshRestoreAge is how old the copy is when it is restored: older
	// than one lead (14.5 s), so that no restored mark covers what the
	// old nodes issued since.
	freshRestoreAge = 16 * time.Second
	// freshOverlap is how long the old nodes stay cut off once the fresh
	// node serves: they keep serving up to their marks meanwhile, which is
	// when today's code repeats (worker, ms) pairs.
	freshOverlap = 4 * time.Second
)

// zkRestoreFreshFirst (hole h): one standalone ZooKeeper server of the
// scenario's own; four nodes on four slots (scarce) reach it through a
// proxy, a fifth ("fresh": no properties file) directly. Under load the
// server's data dir (snapshot and transaction logs) is copied; after
// freshRestoreAge the proxy partitions the four old nodes silently (they
// keep serving up to their marks), the server is stopped, its data dir
// replaced by the copy and restarted, and the fresh node is started
// first: it takes a slot whose restored mark is older than what its
// holder has issued since. Once it serves, the old nodes stay cut off for
// freshOverlap, then the partition heals. The checker must see no
// (worker, ms) pair issued by two node incarnations and no duplicate ID.
//
// Without the cluster incarnation (today's code on a single server: the
// restore keeps ZooKeeper's epoch, and the fresh node writes before any
// old node reconnects) nothing is refused and the fresh node repeats the
// old holder's (worker, ms) pairs. neg: IDGEN_FAULT_NO_INCARNATION_CHECK=1
// on every node (the incarnation check switched off).
//
// noMySQL: the nodes run without --mysql (SNOWFLAKE load only). The
// incarnation check's witness for a node with no record of its own (the
// fresh node) is the database: without one, nothing can tell the fresh
// node that ZooKeeper went back, so this variant is a control that
// documents the limit (it is expected to repeat pairs, fix or not).
func zkRestoreFreshFirst(neg, noMySQL bool) func(*Run) error {
	return func(r *Run) error {
		z, err := r.StartSingleZK()
		if err != nil {
			return err
		}
		p, err := r.ProxyTo(z.Addrs()[0])
		if err != nil {
			return err
		}
		o := ClusterOpts{Nodes: 4, Spare: 1, Args: scarce, Outage: freshOutage, NoFallbackBiz: true, ZK: map[int]string{}, NoMySQL: noMySQL}
		for i := range 4 {
			o.ZK[i] = p.Addr
		}
		if neg {
			o.setFault("IDGEN_FAULT_NO_INCARNATION_CHECK=1", firstNodes(5)...)
		}
		c, err := r.NewCluster(o)
		if err != nil {
			return err
		}
		old, fresh := c.Active(), c.Nodes[4]
		r.StartLoad(old)
		r.Sleep(2 * time.Second)
		snap := filepath.Join(r.Env.WorkDir, r.Name, "zk-snapshot")
		if err := z.Snapshot(snap); err != nil {
			return err
		}
		tSnap := time.Now()
		r.Note("copy of the server's data dir (snapshot and transaction logs) taken under load, the 4 slots claimed")
		r.Sleep(time.Until(tSnap.Add(freshRestoreAge)))
		held := map[int32]string{}
		var holders []string
		for _, n := range old {
			if w, _, err := n.Worker(); err == nil {
				held[w] = n.Name
				holders = append(holders, fmt.Sprintf("%s worker %d", n.Name, w))
			}
		}
		p.Partition()
		t := time.Now()
		r.Note("n0-n3 partitioned from ZooKeeper (silently, by their proxy); held: %s", strings.Join(holders, ", "))
		if err := z.Restore(snap, 60*time.Second); err != nil {
			p.Heal()
			return err
		}
		st, _ := z.Status(0)
		r.Note("server restored from the copy taken %v earlier (zxid now %#x), serving after %v",
			t.Sub(tSnap).Round(time.Second), st.Zxid, time.Since(t).Round(100*time.Millisecond))
		if err := startRetrying(r, fresh, 60*time.Second); err != nil {
			p.Heal()
			return err
		}
		r.AddLoad([]*harness.Node{fresh})
		if err := fresh.WaitSnowflake(90 * time.Second); err != nil {
			r.Violation("fresh n4 (started first on the restored server) not serving SNOWFLAKE 90 s after the restore began: %v", err)
		} else {
			// The verdict rests on the fresh node's claim: a run in which it
			// cannot be asked (it exited, e.g. on a port another process
			// took, and something else answered WaitSnowflake) shows
			// nothing, either way.
			w, _, err := fresh.Worker()
			for i := 0; err != nil && i < 5; i++ {
				time.Sleep(time.Second)
				w, _, err = fresh.Worker()
			}
			if err != nil || !fresh.Running() {
				p.Heal()
				return fmt.Errorf("fresh n4 cannot be asked which worker it took (running %v): %v; the run does not test the restore (see n4.log)", fresh.Running(), err)
			}
			r.Note("fresh n4 took worker %d (held by %s before the restore, still serving up to its mark), serving SNOWFLAKE %v after the restore began",
				w, held[w], time.Since(t).Round(100*time.Millisecond))
		}
		r.Sleep(freshOverlap)
		p.Heal()
		r.Note("partition healed %v after it began", time.Since(t).Round(100*time.Millisecond))
		r.Sleep(8 * time.Second)
		for _, n := range c.Nodes {
			if w, st, err := n.Worker(); err == nil {
				r.Logf("%s at the end: worker %d, state %s", n.Name, w, st)
			}
		}
		r.StopLoad()
		r.Note("log lines on a restore, an incarnation or a refused zxid: %s",
			logMatches(c.Nodes, t, "restore", "incarnation", "zxid"))
		return nil
	}
}
