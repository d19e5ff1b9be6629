package scenario

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"syscall"
	"time"

	"github.com/idgen/idgen/faults/harness"
)

// scarce makes worker slots scarce: 2 node bits, 4 slots in IDC 0.
var scarce = []string{"--idc-bits", "8", "--node-bits", "2"}

// All returns the scenarios in the order the suite runs them.
func All() []Scenario {
	return []Scenario{
		{"baseline", "3 nodes, no fault, 10 s of load", false, baseline},
		{"kill-one", "SIGKILL one node under load, restart it", false, killOne},
		{"kill-all", "SIGKILL all 3 nodes at once, restart them", false, killAll},
		{"pause", "4 slots; SIGSTOP a node past its session, a 5th node takes its exact slot, resume it under load", false, pause},
		{"zk-short", "ZooKeeper SIGKILLed and restarted at once (session 10 s: down shorter than the session)", false, zkShort},
		{"zk-long", "ZooKeeper down 12 s (session 3 s: longer than the session), then back", false, zkLong},
		{"zk-wipe", "ZooKeeper wiped (all znodes, sessions, marks gone) under load", false, zkWipe},
		{"zk-partition", "4 slots; a node silently partitioned from ZooKeeper by a proxy while a 5th node takes its slot, then healed", false, zkPartition},
		{"zk-lost-reply", "the reply to a node's slot create lost by the proxy, at start and again at a re-claim under load", false, zkLostReply},
		{"zk-leader-kill", "3-server ensemble: its leader SIGKILLed under load, an election, the server restarted", false, zkLeaderKill},
		{"zk-rolling-restart", "3-server ensemble: each server stopped and restarted in turn, waiting until it serves again", false, zkRollingRestart},
		{"zk-server-partition", "3-server ensemble: the server of a node's session partitioned from that node by a proxy, then healed", false, zkServerPartition},
		{"zk-restore", "3-server ensemble restored from a 30 s old copy of its data dirs; a node paused across it, a fresh node claims one of 4 slots", false, zkRestore(false)},
		{"stale-cache", "3-server ensemble, 4 slots; a node SIGKILLed, its slot taken, then restarted from its cached slot while cut off from ZooKeeper", false, staleCache},
		{"mysql-kill", "MariaDB SIGKILLed under load, restarted 3 s later", false, mysqlKill},
		{"clock-back-50ms", "one node's clock stepped back 50 ms (faultinject /debug/clock), then forward again", false, clockStep(-50)},
		{"clock-back-3s", "one node's clock stepped back 3 s, then forward again", false, clockStep(-3000)},
		{"clock-forward", "one node's clock stepped forward 3 s, back again, then forward and a clean restart (clock 3 s behind its mark)", false, clockForward},
		{"soak", "random fault every 30 s from a seeded schedule (--soak, --seed)", false, soak},
		{"failover-async", "primary + async replica behind a proxy (VIP), step 50; replica lags 6 s, primary SIGKILLed, replica promoted as it is (lossy), VIP moved", false, failover(false, false, false)},
		{"failover-semisync", "primary + semi-sync (AFTER_SYNC) replica behind a VIP; replica lags, primary SIGKILLed, relay log applied, replica promoted, VIP moved", false, failover(true, true, false)},
		{"galera", "3 Galera members, node i on member i first; hot ORDERED keys from all nodes; member 0 SIGKILLed, restarted, rejoins by rsync SST", false, galera},
		{"galera-one-writer", "galera with every node listing the members in the same order (one writer member, no certification conflicts); that member SIGKILLed, restarted", false, galeraOneWriter},
		{"mysql-partition", "n0's MariaDB traffic through a proxy, silently partitioned for 3 store timeouts, then healed", false, mysqlPartition},
		{"ordered-owner-kill", "ORDERED shard owners (lease 1 s; gapless and cached businesses, hot keys in one shard and cold keys, callers on every node): the hot shard's owner SIGKILLed under load, restarted 4 s later; the cached gap across the crash against one reservation", false, orderedOwnerKill},
		{"ordered-takeover-gap", "ORDERED, default --ordered-lease: the hot shard's owner SIGKILLed 3 times (restarted after the takeover) and 3 times restarted at once at the same address; notes the time from each kill to the hot keys' first answer, and the medians", false, orderedTakeoverGap},
		{"ordered-owner-pause", "ORDERED: the hot shard's owner SIGSTOPped for 3 leases (the others take its shards over and serve), SIGCONT under load", false, orderedOwnerPause},
		{"ordered-owner-zk-partition", "ORDERED store lease: the hot shard's owner (also owning 3 shards with one cached-only hot key each) silently partitioned from ZooKeeper by a proxy for 14 s (past its 10 s barrier membership bound, over 4 sessions) while its clients and MySQL still reach it, then healed; it renews in the store, so none of its shards is taken over and the hot keys' longest gap stays below 3 s (target 1 s); the gapless business shows no hole failed calls do not explain (its session expires with requests in flight)", false, orderedZKPartition(zkPartStoreLease)},
		{"ordered-zk-outage", "ORDERED through a ZooKeeper outage (issue 31 item 4): 3 nodes, default --ordered-lease, --outage-tolerance 30s and session 10s, on a 3-server ensemble; gapless and cached businesses (hot and cold keys, callers on every node), SNOWFLAKE, UNORDERED; the whole ensemble SIGKILLed for 30 s, restarted, load 10 s more; hot keys' longest gap from the kill to the end below 3 s (target 1 s), 0 duplicates, 0 order violations", false, orderedZKOutage},
		{"ordered-zk-partition-failover", "ORDERED store lease and the barrier: primary + async replica behind a VIP; the hot shard's owner partitioned from ZooKeeper (no store lease over the lossy verdict: it loses its shards one lease in, as before), 3 s later the primary SIGKILLed and the lagging replica promoted as it is (lossy), the partition healed 6 s after the failover; 0 duplicates and 0 order violations expected; the hot keys' gaps per phase and the hot shard's owner", false, orderedZKPartitionFailover},
		{"ordered-handoff", "ORDERED: the hot shard's owner SIGTERMed under load (planned hand-off), restarted (hand-off back); the gapless business must show no hole failed calls do not explain", false, orderedHandoff},
		{"ordered-mysql-kill", "ORDERED: MariaDB SIGKILLed under ORDERED load (gapless and cached), restarted 3 s later", false, orderedMySQLKill},
		{"ordered-stale-handoff", "ORDERED epoch: owner A SIGTERMed, its hand-off stalled before the write-back and A SIGSTOPped until B owns the shard; SIGCONT: A's write-back of its old counters must be refused; B SIGKILLed, C loads the rows", false, orderedStaleHandoff(false)},
		{"neg-mysql-unsafe", "CONTROL: MariaDB with innodb_flush_log_at_trx_commit=0, sync_binlog=0, step 10, SIGKILLed with all nodes under load (cross-node guard off: IDGEN_FAULT_NO_REPLICATION_GUARD=1)", true, negMySQLUnsafe},
		{"neg-ignore-not-before", "CONTROL: IDGEN_FAULT_IGNORE_NOT_BEFORE=1, clock +6 s, clean restart (clock back 6 s): no wait past the mark", true, negIgnoreNotBefore},
		{"neg-failover-guard", "CONTROL: failover-async with IDGEN_FAULT_NO_REPLICATION_GUARD=1 on every node (cross-node guard off)", true, failover(false, false, true)},
		{"neg-restore", "CONTROL: zk-restore with IDGEN_FAULT_IGNORE_RESTORE=1 (the restored cluster's wait switched off)", true, zkRestore(true)},
		{"neg-ordered-lease", "CONTROL: ordered-owner-zk-partition with IDGEN_FAULT_ORDERED_NO_LEASE_WAIT=1 on every node, lease 3 s, window 10 s: in the cached-only shards (no persist to fence it) the partitioned owner keeps answering from its reservations for 0.35-1.35 s after the new owner took over and answers above them: real-time order violations", true, orderedZKPartition(zkPartNoLeaseWait)},
		{"neg-ordered-store-lease", "CONTROL: ordered-owner-zk-partition with IDGEN_FAULT_ORDERED_IGNORE_STORE_LEASE=1 on every node, lease 3 s, window 10 s, session 10 s, partition 3 leases (the owner's znode stays, stale): owners still extend through MySQL, takers take on ZooKeeper's word; the partitioned owner answers from its reservations in the cached-only shards for up to a lease beside its successor: real-time order violations", true, orderedZKPartition(zkPartIgnoreStoreLease)},
		{"neg-ordered-epoch", "CONTROL: ordered-stale-handoff with IDGEN_FAULT_ORDERED_NO_EPOCH=1 on every node: A's stale write-back lowers the quiet cached keys' rows below numbers B answered, and C, loading them, repeats those numbers", true, orderedStaleHandoff(true)},
		{"ordered-fence-row-pause", "ORDERED issue 29 hole j: the hot shard's owner SIGSTOPped for 30 s inside a persist after its fence UPDATE (IDGEN_FAULT_ORDERED_PERSIST_STALL): the server ends its idle session (wait_timeout), the others take the shard; hot keys' outage below half the pause", false, orderedFenceRowPause(false)},
		{"neg-fence-row-pause", "CONTROL: ordered-fence-row-pause with IDGEN_FAULT_NO_SESSION_IDLE_LIMIT=1 on every node: the paused owner's transaction holds the fence row for the whole pause; hot keys' outage above the bound", true, orderedFenceRowPause(true)},
		{"ordered-answer-after-loss", "ORDERED issue 31: the hot shard's owner partitioned from ZooKeeper for 5 s (past its 3 s session; it keeps its shards on store renewals); from 0.5 s before the heal every persist of the hot shard stalls 100 ms after its fence UPDATE (IDGEN_FAULT_ORDERED_PERSIST_STALL every); at the heal its expired session breaks its lease: the shard lost with a persist in flight that then commits under the old epoch; the old owner must answer it (answers after loss > 0) and the gapless business show no hole failed calls do not explain", false, orderedAnswerAfterLoss(false)},
		{"neg-ordered-answer-after-loss", "CONTROL: ordered-answer-after-loss with IDGEN_FAULT_ORDERED_REFUSE_AFTER_LOSS=1 on every node: the loss fails the persist's waiters at once (ridden out, retried), the numbers commit anyway: gapless holes no failed call explains", true, orderedAnswerAfterLoss(true)},
		{"two-clusters-one-db", "ORDERED issue 29 hole k: a node of a second cluster starts on the first cluster's database under ORDERED load: refused at start (non-zero exit, the fix in its log); the first cluster keeps serving (hot keys' outage below 5 s)", false, twoClustersOneDB(false)},
		{"neg-two-clusters-one-db", "CONTROL: two-clusters-one-db with IDGEN_FAULT_NO_CLUSTER_BINDING=1 on the second cluster's node: it starts and claims every ORDERED shard in the shared table under the first cluster's owners", true, twoClustersOneDB(true)},
		{"zk-restore-fresh-first", "issue 29 hole h: a single ZooKeeper server restored from a copy of its data dir taken under load; n0-n3 (4 slots) cut off from it by a proxy across the restore, a fresh node (no properties file) started first on the restored server; 0 repeated (worker, ms) pairs expected", false, zkRestoreFreshFirst(false, false)},
		{"neg-zk-restore-fresh-first", "CONTROL: zk-restore-fresh-first with IDGEN_FAULT_NO_INCARNATION_CHECK=1 on every node: the fresh node takes a slot whose restored mark is older than what its holder, cut off, still issues: repeated (worker, ms) pairs", true, zkRestoreFreshFirst(true, false)},
		{"neg-zk-restore-fresh-first-no-mysql", "CONTROL (a known limit): zk-restore-fresh-first with the nodes run without --mysql (SNOWFLAKE load only): the fresh node has no record and no database witness, so nothing tells it ZooKeeper went back: repeated (worker, ms) pairs expected, fix or not", true, zkRestoreFreshFirst(false, true)},
		{"async-failover-paused", "issue 29 (hole c): primary + async replica behind a VIP, step 5000, ORDERED + UNORDERED + SNOWFLAKE load; the replica lags, n1 SIGSTOPped 12 s (past its 3 s session), the primary SIGKILLed 6 s into the pause and the replica promoted as it is (lossy), n1 resumed under load; 0 duplicates and 0 order violations expected", false, asyncFailoverPaused(false)},
		{"neg-async-failover-paused", "CONTROL: async-failover-paused with IDGEN_FAULT_NO_REPLICATION_GUARD=1 on every node (cross-node guard off)", true, asyncFailoverPaused(true)},
	}
}

func std(r *Run, o ClusterOpts) (*Cluster, error) {
	if o.Nodes == 0 {
		o.Nodes = 3
	}
	return r.NewCluster(o)
}

func baseline(r *Run) error {
	c, err := std(r, ClusterOpts{})
	if err != nil {
		return err
	}
	r.StartLoad(c.Active())
	r.Sleep(10 * time.Second)
	r.StopLoad()
	return nil
}

func killOne(r *Run) error {
	c, err := std(r, ClusterOpts{})
	if err != nil {
		return err
	}
	r.StartLoad(c.Active())
	r.Sleep(4 * time.Second)
	n := c.Nodes[1]
	n.Kill()
	r.Note("killed n1")
	r.Sleep(2 * time.Second)
	t := time.Now()
	if err := n.Start(60 * time.Second); err != nil {
		return err
	}
	if err := n.WaitSnowflake(60 * time.Second); err != nil {
		return err
	}
	r.Note("n1 back, serving SNOWFLAKE %v after restart", time.Since(t).Round(100*time.Millisecond))
	r.Sleep(4 * time.Second)
	r.StopLoad()
	return nil
}

func parallel(nodes []*harness.Node, f func(*harness.Node) error) error {
	var wg sync.WaitGroup
	errs := make([]error, len(nodes))
	for i, n := range nodes {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = f(n) }()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func killAll(r *Run) error {
	c, err := std(r, ClusterOpts{})
	if err != nil {
		return err
	}
	r.StartLoad(c.Active())
	r.Sleep(4 * time.Second)
	_ = parallel(c.Active(), func(n *harness.Node) error { n.Kill(); return nil })
	r.Note("killed all")
	r.Sleep(time.Second)
	t := time.Now()
	if err := parallel(c.Active(), func(n *harness.Node) error {
		if err := n.Start(60 * time.Second); err != nil {
			return err
		}
		return n.WaitSnowflake(60 * time.Second)
	}); err != nil {
		return err
	}
	r.Note("all serving SNOWFLAKE %v after restart", time.Since(t).Round(100*time.Millisecond))
	r.Sleep(4 * time.Second)
	r.StopLoad()
	return nil
}

// takeSlot starts spare and waits until it holds worker w and serves
// SNOWFLAKE.
func takeSlot(r *Run, spare *harness.Node, w int32) error {
	t := time.Now()
	if err := spare.Start(60 * time.Second); err != nil {
		return err
	}
	if err := spare.WaitSnowflake(60 * time.Second); err != nil {
		return err
	}
	got, _, err := spare.Worker()
	if err != nil {
		return err
	}
	if got != w {
		return fmt.Errorf("%s took worker %d, not the victim's %d: the scenario did not happen", spare.Name, got, w)
	}
	r.Note("%s took worker %d, serving SNOWFLAKE %v after start", spare.Name, w, time.Since(t).Round(100*time.Millisecond))
	return nil
}

func pause(r *Run) error {
	c, err := std(r, ClusterOpts{Nodes: 4, Spare: 1, Args: scarce})
	if err != nil {
		return err
	}
	r.StartLoad(c.Active())
	r.Sleep(3 * time.Second)
	victim, spare := c.Nodes[1], c.Nodes[4]
	w, _, err := victim.Worker()
	if err != nil {
		return err
	}
	victim.Signal(syscall.SIGSTOP)
	r.Note("SIGSTOP n1 (worker %d)", w)
	r.Sleep(5 * time.Second) // session 3 s
	if err := takeSlot(r, spare, w); err != nil {
		victim.Signal(syscall.SIGCONT)
		return err
	}
	r.AddLoad([]*harness.Node{spare})
	r.Sleep(time.Second)
	victim.Signal(syscall.SIGCONT)
	r.Note("SIGCONT n1")
	r.Sleep(8 * time.Second)
	if w2, st, err := victim.Worker(); err == nil {
		r.Note("n1 after resume: worker %d, state %s", w2, st)
	}
	r.StopLoad()
	return nil
}

func zkShort(r *Run) error {
	c, err := std(r, ClusterOpts{Session: "10s"})
	if err != nil {
		return err
	}
	r.StartLoad(c.Active())
	r.Sleep(3 * time.Second)
	t := time.Now()
	r.Env.Servers.ZKKill()
	if err := r.Env.Servers.ZKStart(); err != nil {
		return err
	}
	r.Note("ZooKeeper down %v (session 10s)", time.Since(t).Round(100*time.Millisecond))
	r.Sleep(8 * time.Second)
	r.StopLoad()
	return nil
}

func zkLong(r *Run) error {
	c, err := std(r, ClusterOpts{})
	if err != nil {
		return err
	}
	r.StartLoad(c.Active())
	r.Sleep(3 * time.Second)
	t := time.Now()
	r.Env.Servers.ZKKill()
	r.Sleep(12 * time.Second)
	if err := r.Env.Servers.ZKStart(); err != nil {
		return err
	}
	r.Note("ZooKeeper down %v (session 3s)", time.Since(t).Round(100*time.Millisecond))
	if err := parallel(c.Active(), func(n *harness.Node) error { return n.WaitSnowflake(60 * time.Second) }); err != nil {
		return err
	}
	r.Note("all serving SNOWFLAKE again %v after ZooKeeper was killed", time.Since(t).Round(100*time.Millisecond))
	r.Sleep(4 * time.Second)
	r.StopLoad()
	return nil
}

func zkWipe(r *Run) error {
	c, err := std(r, ClusterOpts{})
	if err != nil {
		return err
	}
	r.StartLoad(c.Active())
	r.Sleep(3 * time.Second)
	t := time.Now()
	if err := r.Env.Servers.ZKWipe(); err != nil {
		return err
	}
	r.Note("ZooKeeper wiped, back after %v", time.Since(t).Round(100*time.Millisecond))
	// The nodes notice the wipe at their next heartbeat and re-create the
	// cluster; a slot whose mark was lost is taken one lead later, so
	// SNOWFLAKE proper pauses (fallback serves): the gap shows it.
	r.Sleep(10 * time.Second)
	if err := parallel(c.Active(), func(n *harness.Node) error { return n.WaitSnowflake(90 * time.Second) }); err != nil {
		return err
	}
	r.Sleep(3 * time.Second)
	r.StopLoad()
	return nil
}

func zkPartition(r *Run) error {
	p, err := r.Proxy()
	if err != nil {
		return err
	}
	c, err := std(r, ClusterOpts{Nodes: 4, Spare: 1, Args: scarce, ZK: map[int]string{1: p.Addr}})
	if err != nil {
		return err
	}
	r.StartLoad(c.Active())
	r.Sleep(3 * time.Second)
	victim, spare := c.Nodes[1], c.Nodes[4]
	w, _, err := victim.Worker()
	if err != nil {
		return err
	}
	p.Partition()
	t := time.Now()
	r.Note("n1 (worker %d) partitioned from ZooKeeper", w)
	r.Sleep(5 * time.Second)
	if err := takeSlot(r, spare, w); err != nil {
		p.Heal()
		return err
	}
	r.AddLoad([]*harness.Node{spare})
	r.Sleep(3 * time.Second)
	p.Heal()
	r.Note("healed after %v", time.Since(t).Round(100*time.Millisecond))
	r.Sleep(6 * time.Second)
	if w2, st, err := victim.Worker(); err == nil {
		r.Note("n1 after heal: worker %d, state %s", w2, st)
	}
	r.StopLoad()
	return nil
}

func zkLostReply(r *Run) error {
	p, err := r.Proxy()
	if err != nil {
		return err
	}
	c, err := std(r, ClusterOpts{ZK: map[int]string{1: p.Addr}, BeforeStart: func(i int) error {
		if i == 1 {
			p.LoseNextSlotCreateReply()
		}
		return nil
	}})
	if err != nil {
		return err
	}
	if p.Lost.Load() == 0 {
		return errors.New("the proxy saw no slot create from n1 at start: the scenario did not happen")
	}
	r.Note("reply to n1's slot create lost at start")
	r.StartLoad(c.Active())
	r.Sleep(3 * time.Second)
	// Expire n1's session under load, and lose the reply to its re-claim.
	p.LoseNextSlotCreateReply()
	p.Partition()
	r.Sleep(5 * time.Second)
	p.Heal()
	deadline := time.Now().Add(30 * time.Second)
	for p.Lost.Load() < 2 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if p.Lost.Load() < 2 {
		r.Note("no re-claim create seen after the session expired")
	} else {
		r.Note("reply to n1's re-claim create lost under load")
	}
	if err := c.Nodes[1].WaitSnowflake(60 * time.Second); err != nil {
		return err
	}
	r.Sleep(4 * time.Second)
	r.StopLoad()
	return nil
}

// killMySQL SIGKILLs the suite's MariaDB under load and starts it again
// (crash-safe) after down.
func (r *Run) killMySQL(down time.Duration) error {
	t := time.Now()
	r.Env.Servers.MySQLKill()
	r.Sleep(down)
	if err := r.Env.Servers.MySQLStart(false); err != nil {
		return err
	}
	r.Note("MariaDB down %v", time.Since(t).Round(100*time.Millisecond))
	return nil
}

func mysqlKill(r *Run) error {
	c, err := std(r, ClusterOpts{})
	if err != nil {
		return err
	}
	r.StartLoad(c.Active())
	r.Sleep(4 * time.Second)
	if err := r.killMySQL(3 * time.Second); err != nil {
		return err
	}
	r.Sleep(6 * time.Second)
	r.StopLoad()
	return nil
}

func clockStep(ms int64) func(*Run) error {
	return func(r *Run) error {
		c, err := std(r, ClusterOpts{FaultInject: true})
		if err != nil {
			return err
		}
		r.StartLoad(c.Active())
		r.Sleep(3 * time.Second)
		n := c.Nodes[0]
		if err := n.ShiftClock(ms); err != nil {
			return err
		}
		r.Note("n0 clock %+d ms", ms)
		r.Sleep(time.Duration(-ms)*time.Millisecond + 3*time.Second)
		if err := n.ShiftClock(0); err != nil {
			return err
		}
		r.Note("n0 clock back to +0")
		r.Sleep(3 * time.Second)
		r.StopLoad()
		return nil
	}
}

func clockForward(r *Run) error {
	c, err := std(r, ClusterOpts{FaultInject: true})
	if err != nil {
		return err
	}
	r.StartLoad(c.Active())
	r.Sleep(3 * time.Second)
	n := c.Nodes[0]
	if err := n.ShiftClock(3000); err != nil {
		return err
	}
	r.Note("n0 clock +3000 ms")
	r.Sleep(3 * time.Second)
	if err := n.ShiftClock(0); err != nil {
		return err
	}
	r.Note("n0 clock back to +0 (a 3 s step back)")
	r.Sleep(5 * time.Second)
	if err := n.ShiftClock(3000); err != nil {
		return err
	}
	r.Sleep(2 * time.Second)
	n.Term()
	t := time.Now()
	if err := n.Start(60 * time.Second); err != nil {
		return err
	}
	if err := n.WaitSnowflake(60 * time.Second); err != nil {
		return err
	}
	r.Note("n0 clock +3000 ms, clean restart (clock 3 s behind its mark): SNOWFLAKE after %v", time.Since(t).Round(100*time.Millisecond))
	r.Sleep(3 * time.Second)
	r.StopLoad()
	return nil
}

// soak injects a random fault every 30 s for r.Env.Soak, from a schedule
// drawn from the seed.
func soak(r *Run) error {
	c, err := std(r, ClusterOpts{FaultInject: true})
	if err != nil {
		return err
	}
	s := r.Env.Servers
	rng := rand.New(rand.NewPCG(r.Env.Seed, 0x50a4))
	nodes := c.Active()
	type fault struct {
		name string
		f    func() error
	}
	pick := func() *harness.Node { return nodes[rng.IntN(len(nodes))] }
	restart := func(n *harness.Node) error {
		if err := n.Start(60 * time.Second); err != nil {
			return err
		}
		return n.WaitSnowflake(60 * time.Second)
	}
	faults := []func() fault{
		func() fault {
			n := pick()
			return fault{"kill " + n.Name, func() error { n.Kill(); time.Sleep(time.Second); return restart(n) }}
		},
		func() fault {
			return fault{"kill all", func() error {
				_ = parallel(nodes, func(n *harness.Node) error { n.Kill(); return nil })
				time.Sleep(time.Second)
				return parallel(nodes, restart)
			}}
		},
		func() fault {
			n := pick()
			return fault{"pause " + n.Name + " 5s", func() error {
				n.Signal(syscall.SIGSTOP)
				time.Sleep(5 * time.Second)
				n.Signal(syscall.SIGCONT)
				return nil
			}}
		},
		func() fault {
			return fault{"ZooKeeper restart", func() error { s.ZKKill(); return s.ZKStart() }}
		},
		func() fault {
			return fault{"ZooKeeper down 8s", func() error { s.ZKKill(); time.Sleep(8 * time.Second); return s.ZKStart() }}
		},
		func() fault {
			return fault{"MariaDB kill 3s", func() error { s.MySQLKill(); time.Sleep(3 * time.Second); return s.MySQLStart(false) }}
		},
		func() fault {
			n, ms := pick(), []int64{-50, -3000, 3000}[rng.IntN(3)]
			return fault{fmt.Sprintf("clock %s %+dms for 5s", n.Name, ms), func() error {
				if err := n.ShiftClock(ms); err != nil {
					return err
				}
				time.Sleep(5 * time.Second)
				return n.ShiftClock(0)
			}}
		},
	}
	r.StartLoad(nodes)
	end := time.Now().Add(r.Env.Soak)
	var done []string
	for i := 0; time.Now().Add(30*time.Second).Before(end.Add(time.Second)) && i < 100; i++ {
		next := time.Now().Add(30 * time.Second)
		f := faults[rng.IntN(len(faults))]()
		r.Logf("soak fault %d: %s", i+1, f.name)
		if err := f.f(); err != nil {
			return fmt.Errorf("soak fault %d (%s): %w", i+1, f.name, err)
		}
		done = append(done, f.name)
		time.Sleep(time.Until(next))
	}
	r.Note("seed %d, %d faults: %v", r.Env.Seed, len(done), done)
	r.StopLoad()
	return nil
}

func negMySQLUnsafe(r *Run) error {
	s := r.Env.Servers
	s.MySQLStop()
	if err := s.MySQLStart(true); err != nil {
		return err
	}
	// The cross-node guard off too: its ledger in ZooKeeper catches many of
	// the segments MariaDB forgets (seen: seeds 23 and 24 found no
	// duplicate with it on), which made this control fail only by chance.
	// Off, nothing but the durability check stands between the lost
	// commits and numbers handed out again, which is what this control
	// shows.
	o := ClusterOpts{Step: 10, Args: []string{"--mysql-accept-unsafe-durability=true", "--max-step", "50"}}
	o.setFault("IDGEN_FAULT_NO_REPLICATION_GUARD=1", firstNodes(3)...)
	c, err := std(r, o)
	if err != nil {
		return err
	}
	r.StartLoad(c.Active())
	r.Sleep(4 * time.Second)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); s.MySQLKill() }()
	_ = parallel(c.Active(), func(n *harness.Node) error { n.Kill(); return nil })
	wg.Wait()
	r.Note("MariaDB (unsafe) and all nodes SIGKILLed")
	if err := s.MySQLStart(true); err != nil {
		return err
	}
	if err := parallel(c.Active(), func(n *harness.Node) error { return n.Start(60 * time.Second) }); err != nil {
		return err
	}
	// ORDERED shards come back after their owners' lease wait (new
	// processes wait one lease for owners they never saw renew): keep the
	// load on long enough for the keys to be served again.
	r.Sleep(12 * time.Second)
	r.StopLoad()
	return nil
}

func negIgnoreNotBefore(r *Run) error {
	c, err := std(r, ClusterOpts{FaultInject: true, Env: map[int][]string{0: {"IDGEN_FAULT_IGNORE_NOT_BEFORE=1"}}})
	if err != nil {
		return err
	}
	r.StartLoad(c.Active())
	r.Sleep(2 * time.Second)
	n := c.Nodes[0]
	if err := n.ShiftClock(6000); err != nil {
		return err
	}
	r.Note("n0 clock +6000 ms")
	r.Sleep(4 * time.Second)
	n.Term()
	if err := n.Start(60 * time.Second); err != nil {
		return err
	}
	r.Note("n0 restarted cleanly, clock 6 s behind its mark, NotBefore ignored")
	r.Sleep(6 * time.Second)
	r.StopLoad()
	return nil
}
