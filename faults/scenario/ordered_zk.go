package scenario

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/idgen/idgen/faults/checker"
	"github.com/idgen/idgen/faults/harness"
)

// The ORDERED scenarios of issue 31 item 4: ORDERED rides a ZooKeeper
// outage, because an owner that still reaches MySQL renews its lease there
// too (ordered/storelease.go) and nobody takes a shard over while its
// store nonce changes.

const (
	// ordGapBound is the longest time the hot keys of a business may go
	// without a successful answer (any node, any hot key) while the owner
	// is cut off from ZooKeeper (ordered-zk-outage,
	// ordered-owner-zk-partition). The target is 1 s (issue 31's table).
	// The bound is three times that, and equal to the load's per-call
	// timeout, because the suite runs on a busy 2-core machine: three
	// nodes, one to three ZooKeeper JVMs (restarting in the outage
	// scenario), MariaDB and the load generator share two cores, and a
	// process stalled for a few hundred ms, a store renewal that misses
	// its lease/3 turn, or one call that waits out a MariaDB hiccup then
	// shows as a gap of about a second, not of 30 s. The old mechanism's
	// gap (the lease lapses one lease into the outage, nobody can take
	// over) is the outage itself, ten times the bound. The measured
	// figure is always printed, so it can be reported against 1 s.
	ordGapBound = 3 * time.Second
	// zkOutageDown is how long ordered-zk-outage keeps ZooKeeper
	// SIGKILLed before restarting it: the default --outage-tolerance.
	zkOutageDown = 30 * time.Second
	// zkOutageAfter is how long the load runs once ZooKeeper serves again.
	zkOutageAfter = 10 * time.Second
	// zkOutageLease is zkown.DefaultLease (the scenario runs the server's
	// default --ordered-lease; this only paces its waits).
	zkOutageLease = time.Second
)

// gapFigures are one business's ORDERED figures over a time window.
type gapFigures struct {
	hot      checker.Gap // no answer on any hot key (any node)
	any      checker.Gap // no answer on any key of the business
	worst    checker.Gap // the worst single caller of a hot key (node, key)
	worstWho string
}

// orderedGaps computes biz's gap figures within [from, to].
func (s *ordSetup) orderedGaps(calls []checker.Call, biz string, from, to time.Time) gapFigures {
	hot := s.hotKeys(biz)
	all := keyList(hot)
	all = append(all, s.cold...)
	f := gapFigures{
		hot: checker.KeyOutage(calls, biz, keyList(hot), from, to),
		any: checker.KeyOutage(calls, biz, all, from, to),
	}
	ends := map[string][]time.Time{}
	for i := range calls {
		c := &calls[i]
		if c.Channel == checker.Ordered && c.Biz == biz && hot[c.SubKey] {
			if _, ok := ends[c.Caller]; !ok {
				ends[c.Caller] = nil
			}
			if c.OK() && !c.End.Before(from) && !c.End.After(to) {
				ends[c.Caller] = append(ends[c.Caller], c.End)
			}
		}
	}
	for who, ts := range ends {
		g := checker.LongestGap(who, ts, from, to)
		if g.Len > f.worst.Len {
			f.worst, f.worstWho = g, who
		}
	}
	return f
}

func gapText(g checker.Gap) string {
	return fmt.Sprintf("%.2f s (%s..%s)", g.Len.Seconds(), clock(g.From), clock(g.To))
}

// noteGaps notes both businesses' gap figures within [from, to] (what)
// and records a violation when bounded and a business's hot keys went
// without an answer for longer than ordGapBound. It returns the longest
// hot-key gap.
func (s *ordSetup) noteGaps(r *Run, from, to time.Time, what string, bounded bool) time.Duration {
	var longest time.Duration
	for _, biz := range []string{bizGapless, bizCached} {
		f := s.orderedGaps(r.calls, biz, from, to)
		r.Note("%s (%s) %s: hot keys' longest gap %s; any key's %s; worst single hot caller %s %s",
			biz, modeOf(biz), what, gapText(f.hot), gapText(f.any), f.worstWho, gapText(f.worst))
		longest = max(longest, f.hot.Len)
		if bounded && f.hot.Len > ordGapBound {
			r.Violation("%s (%s) %s: hot keys went %.2f s without an answer (bound %v, target 1 s)", biz, modeOf(biz), what,
				f.hot.Len.Seconds(), ordGapBound)
		}
	}
	return longest
}

// failuresIn notes the failed ORDERED calls answered within [from, to] by
// code (with the first message of each) and the SNOWFLAKE gap per node in
// that window (generator answers only).
func failuresIn(r *Run, from, to time.Time, what string) {
	codes := map[string]int{}
	first := map[string]string{}
	transport := 0
	var win []checker.Call
	for i := range r.calls {
		c := &r.calls[i]
		if c.End.Before(from) || c.Start.After(to) {
			continue
		}
		win = append(win, *c)
		switch {
		case c.Channel != checker.Ordered:
		case c.Err != nil:
			k := checker.CodeName(c.Err.Code)
			codes[k]++
			if first[k] == "" {
				first[k] = c.Err.Message
			}
		case c.Transport != "":
			transport++
		}
	}
	var parts []string
	for k, v := range codes {
		m := first[k]
		if len(m) > 120 {
			m = m[:120] + "..."
		}
		parts = append(parts, fmt.Sprintf("%s %d (%q)", k, v, m))
	}
	sort.Strings(parts)
	res := &Result{NodeGaps: snowflakeNodeGaps(win, to)}
	r.Note("%s: ORDERED failed calls {%s}, no answer %d; SNOWFLAKE gap per node %s", what, strings.Join(parts, ", "), transport,
		res.NodeGapsText())
}

// ownerAnswers returns each node's idgen_ordered_owner_answers_total (-1
// when its metrics cannot be read): who answered ORDERED as an owner.
func ownerAnswers(nodes []*harness.Node) map[*harness.Node]float64 {
	out := map[*harness.Node]float64{}
	for _, n := range nodes {
		out[n] = metric(n, "idgen_ordered_owner_answers_total")
	}
	return out
}

// metric reads one unlabelled metric from the node's /metrics (-1: not
// readable).
func metric(n *harness.Node, name string) float64 {
	code, body, err := n.Do("GET", "/metrics")
	if err != nil || code != 200 {
		return -1
	}
	for _, l := range strings.Split(body, "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			if err == nil {
				return v
			}
		}
	}
	return -1
}

// answersText renders the growth of ownerAnswers between two readings.
func answersText(nodes []*harness.Node, a, b map[*harness.Node]float64) string {
	var parts []string
	for _, n := range nodes {
		if a[n] < 0 || b[n] < 0 {
			parts = append(parts, n.Name+" unknown")
			continue
		}
		parts = append(parts, fmt.Sprintf("%s %.0f", n.Name, b[n]-a[n]))
	}
	return strings.Join(parts, ", ")
}

// orderedZKOutage: three nodes with the server's default --ordered-lease
// and --outage-tolerance (30 s) and session timeout (10 s) on a
// three-server ZooKeeper ensemble of the scenario's own; ORDERED load
// (gapless and cached businesses, hot and cold keys, callers on every
// node), SNOWFLAKE and UNORDERED. The whole ensemble is SIGKILLed for
// zkOutageDown, then restarted; the load runs throughout and
// zkOutageAfter after. The hot keys' longest gap from the kill to the end
// must stay within ordGapBound; the checker's duplicates and order
// violations must be 0.
func orderedZKOutage(r *Run) error {
	z, err := r.StartEnsemble()
	if err != nil {
		return err
	}
	s, err := ordCluster(r, ordOpts{Victim: 1, Lease: zkOutageLease, ServerLease: true,
		ClusterOpts: ClusterOpts{Outage: zkOutageDown.String(), Session: "10s"}})
	if err != nil {
		return err
	}
	s.startLoad(r)
	r.Sleep(4 * time.Second)
	nodes := s.c.Active()
	before := ownerAnswers(nodes)
	kill := time.Now()
	for i := range z.N() {
		if err := z.Kill(i); err != nil {
			return fmt.Errorf("SIGKILL %s: %w", zkName(i), err)
		}
	}
	r.Note("ZooKeeper ensemble (3 servers) SIGKILLed for %v", zkOutageDown)
	sleepUntil(kill.Add(zkOutageDown))
	down := ownerAnswers(nodes)
	restart := time.Now()
	if err := z.StartAll(120 * time.Second); err != nil {
		return err
	}
	back := time.Now()
	r.Note("ZooKeeper restarted %v after the kill, serving again %v after the kill (restart took %v)",
		restart.Sub(kill).Round(100*time.Millisecond), back.Sub(kill).Round(100*time.Millisecond), back.Sub(restart).Round(100*time.Millisecond))
	r.Sleep(zkOutageAfter)
	r.StopLoad()
	after := ownerAnswers(nodes)
	r.Note("ORDERED owner answers per node while ZooKeeper was down: %s; after: %s", answersText(nodes, before, down),
		answersText(nodes, down, after))
	s.report(r)
	failuresIn(r, kill, back, "ZooKeeper down")
	failuresIn(r, back, r.to, "after ZooKeeper came back")
	s.noteGaps(r, kill, back, "while ZooKeeper was down", false)
	longest := s.noteGaps(r, kill, r.to, "from the kill to the end", true)
	r.Note("ORDERED longest hot-key gap through the ZooKeeper outage: %.2f s (bound %v, target 1 s)", longest.Seconds(), ordGapBound)
	return nil
}

// The seam of ordered-zk-partition-failover's timeline.
const (
	// zkFoLagBefore is how long the replica lags before the owner is cut
	// off from ZooKeeper; zkFoRide how long the owner rides on its store
	// renewals before the lossy failover (3 leases); zkFoAfter how long
	// it stays cut off on the new server (past its 3 s session, and
	// several leases: the others' barrier runs, its own cannot).
	zkFoLagBefore = time.Second
	zkFoRide      = 3 * time.Second
	zkFoAfter     = 6 * time.Second
)

// orderedZKPartitionFailover (the seam of the store lease and the
// barrier): P and an async R behind the VIP; three nodes on it, n1
// reaching ZooKeeper through a proxy and owning the hot shard. Under
// ORDERED load the replica lags (SQL thread stopped), n1 is partitioned
// from ZooKeeper, zkFoRide later P is SIGKILLed and R promoted as it is
// (lossy) and the VIP moved, zkFoAfter later the partition heals. The
// replication's verdict is lossy (an async replica), so no node renews
// the store lease: n1 loses its shards one lease into the partition and
// the others take them on the old primary, as before store leases. With
// the store lease renewed over this replication (the first version of
// issue 31 item 4), n1 kept its shards into the failover, could not raise
// its rows on the new server (its barrier needs ZooKeeper), was counted
// gone by the others' barrier, and they handed its lost numbers out again:
// thousands of duplicates in every run. 0 duplicates and 0 order
// violations expected; the figures are the hot keys' gaps in each phase
// and who owns the hot shard.
func orderedZKPartitionFailover(r *Run) error {
	rp, err := startPair(r, false)
	defer rp.close()
	if err != nil {
		return err
	}
	p, err := r.Proxy()
	if err != nil {
		return err
	}
	s, err := ordCluster(r, ordOpts{Victim: 1, ClusterOpts: ClusterOpts{ZK: map[int]string{1: p.Addr},
		MySQLBase: "root@tcp(" + rp.VIP.Addr + ")/"}})
	if err != nil {
		return err
	}
	if err := rp.R.WaitReplicated(rp.P, 30*time.Second); err != nil {
		return err
	}
	a := s.victim
	s.startLoad(r)
	r.Sleep(3 * time.Second)
	if p.Active() == 0 {
		return fmt.Errorf("%s has no connection through its ZooKeeper proxy: the scenario cannot happen", a.Name)
	}
	off := s.logOffsets()
	if err := rp.R.Exec("STOP SLAVE SQL_THREAD"); err != nil {
		return err
	}
	lag := time.Now()
	r.Note("replica lags: SQL thread stopped")
	sleepUntil(lag.Add(zkFoLagBefore))
	p.Partition()
	part := time.Now()
	r.Note("%s (owner of shard %d) partitioned from ZooKeeper", a.Name, s.shard)
	sleepUntil(part.Add(zkFoRide))
	kill := time.Now()
	rp.P.Kill()
	st, err := rp.R.SlaveStatus()
	if err != nil {
		p.Heal()
		return err
	}
	applied, _ := rp.R.Var("gtid_slave_pos")
	received := st["Gtid_IO_Pos"]
	if err := rp.R.Promote(); err != nil {
		p.Heal()
		return err
	}
	rp.VIP.SwitchTarget(rp.R.Addr())
	r.Note("primary SIGKILLed %v into the partition; replica promoted as it was (received %s, applied %s: %d transactions lost); VIP switched: failover %v",
		kill.Sub(part).Round(100*time.Millisecond), received, applied, harness.GTIDSeq(received)-harness.GTIDSeq(applied),
		time.Since(kill).Round(time.Millisecond))
	var seen []string
	last := ""
	for time.Now().Before(kill.Add(zkFoAfter)) {
		if name := s.ownerName(s.others()[0]); name != last {
			seen = append(seen, fmt.Sprintf("%s at +%v", name, time.Since(kill).Round(10*time.Millisecond)))
			last = name
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.Heal()
	heal := time.Now()
	r.Note("healed %v after the partition; hot shard %d's owner as %s saw it after the failover: %s", heal.Sub(part).Round(100*time.Millisecond),
		s.shard, s.others()[0].Name, strings.Join(seen, ", "))
	s.finish(r, s.others()[0], 10*time.Second, off)
	s.noteGaps(r, part, kill, "cut off from ZooKeeper, before the failover", false)
	s.noteGaps(r, kill, heal, "from the failover to the heal", false)
	s.noteGaps(r, heal, r.to, "after the heal", false)
	for _, biz := range []string{bizGapless, bizCached} {
		r.Note("%s hot keys: first answer after the failover %s, after the heal %s", biz,
			s.firstAnswer(r, biz, kill), s.firstAnswer(r, biz, heal))
	}
	failuresIn(r, kill, heal, "from the failover to the heal")
	r.Note("node log lines since the failover on the barrier, the gate, the store lease: %s",
		logMatches(s.c.Active(), kill, "barrier", "gate", "through the store", "store's renewals"))
	return nil
}

// firstAnswer is the time from t to the first successful answer on a hot
// key of biz that started after t ("none" without one).
func (s *ordSetup) firstAnswer(r *Run, biz string, t time.Time) string {
	hot := s.hotKeys(biz)
	var first time.Time
	for i := range r.calls {
		c := &r.calls[i]
		if c.OK() && c.Channel == checker.Ordered && c.Biz == biz && hot[c.SubKey] && c.Start.After(t) &&
			(first.IsZero() || c.End.Before(first)) {
			first = c.End
		}
	}
	if first.IsZero() {
		return "none"
	}
	return fmt.Sprintf("+%.2f s (%s)", first.Sub(t).Seconds(), clock(first))
}
