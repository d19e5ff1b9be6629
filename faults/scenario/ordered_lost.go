package scenario

import (
	"fmt"
	"os"
	"time"
)

// The real-server scenario of issue 31's answers after a lost shard
// (ordered.Allocator.answerable): an owner loses the hot shard while a
// gapless persist of it is in flight, and the persist then commits under
// the owner's epoch. ordered-owner-zk-partition loses it the same way
// (its expired ZooKeeper session noticed at the heal), but has a persist
// in flight at that moment in some runs only; here every persist of the
// hot shard stalls inside its transaction across the moment.

const (
	// lostPartFor is how long the owner stays cut off from ZooKeeper:
	// past its session (the suite's 3 s), so the server expires it, while
	// the owner keeps its shards on its store renewals. At the heal the
	// owner's client reconnects, hears its session expired, and the
	// owner's lease is broken: every shard it held lost at once.
	lostPartFor = 5 * time.Second
	// lostArm is how long before the heal every persist of the hot shard
	// starts stalling; the stalls go on until the owner dropped the shard
	// (lostDropWithin at most).
	lostArm = 500 * time.Millisecond
	// lostStall is each persist's stall after its fence UPDATE, holding
	// the shard's fence row (IDGEN_FAULT_ORDERED_PERSIST_STALL ... every).
	// The rounds of the hot keys follow each other, so a persist is in
	// flight at almost any moment: the loss falls inside one. Short, so
	// that the requests of the stalled round are younger than the
	// server's ride-out budget (500 ms, server/ordered.go) when the loss
	// fails them: refused (the control), they are retried at once and
	// end in a refusal saying the node does not own the shard, or another
	// term's numbers, as in ordered-owner-zk-partition's holes. With
	// 200 ms, on a machine loaded beside the suite, the waiters were too
	// old in one control run of five: their refusal reached the callers,
	// and a failed call explains a hole.
	lostStall = 100 * time.Millisecond
	// lostDropWithin bounds the wait for the owner to drop the hot shard
	// after the heal (observed: 1 to 2 s, the ZooKeeper client's
	// reconnect and the lease's check).
	lostDropWithin = 6 * time.Second
)

// orderedAnswerAfterLoss: the hot shard's owner A reaches ZooKeeper
// through a proxy and is partitioned from it for lostPartFor under ORDERED
// load; it keeps its shards on its store renewals. lostArm before the heal
// every persist of the hot shard starts stalling lostStall after its fence
// UPDATE (the fence row held; the next term's claim queues on it). At the
// heal A hears its session expired, its lease is broken and the hot shard
// lost with a persist in flight, which commits under A's epoch when its
// stall ends; the next term loads above it. The stalls stop once A
// dropped the shard. A must answer the committed numbers
// (idgen_ordered_owner_answers_after_loss_total > 0 on A; the scenario
// errs when it stays 0: no persist was in flight at the loss) and the
// gapless business show no hole failed calls do not explain.
//
// neg (IDGEN_FAULT_ORDERED_REFUSE_AFTER_LOSS=1 on every node: the
// behaviour before issue 31's fix): the loss fails the persist's waiters
// at once, the server's ride-out retries them (the shard is no longer
// A's), the numbers commit anyway and nobody answered them: gapless holes
// no failed call explains, the violation the control fails by.
func orderedAnswerAfterLoss(neg bool) func(*Run) error {
	return func(r *Run) error {
		p, err := r.Proxy()
		if err != nil {
			return err
		}
		arm, err := persistStallFile(r)
		if err != nil {
			return err
		}
		o := ordOpts{Victim: 1, ClusterOpts: ClusterOpts{ZK: map[int]string{1: p.Addr}}}
		o.setFault("IDGEN_FAULT_ORDERED_PERSIST_STALL="+arm, 1)
		if neg {
			r.negViolation = true
			o.setFault("IDGEN_FAULT_ORDERED_REFUSE_AFTER_LOSS=1", firstNodes(3)...)
		}
		s, err := ordCluster(r, o)
		if err != nil {
			return err
		}
		a := s.victim
		if len(a.LogLines(0, "ORDERED lease is renewed in the store too")) == 0 {
			return fmt.Errorf("%s does not renew its ORDERED lease in the store: it would lose its shards one lease into the partition, not at the heal: the scenario cannot happen", a.Name)
		}
		var part time.Time
		cutOff := func() error {
			if p.Active() == 0 {
				return fmt.Errorf("%s has no connection through its ZooKeeper proxy: the scenario cannot happen", a.Name)
			}
			p.Partition()
			part = time.Now()
			r.Note("%s (owner of shard %d) partitioned from ZooKeeper for %v (session 3 s)", a.Name, s.shard, lostPartFor)
			sleepUntil(part.Add(lostPartFor - lostArm))
			return armPersistStall(arm, s.shard, lostStall, true)()
		}
		healAt := func() { sleepUntil(part.Add(lostPartFor)); p.Heal() }
		st, err := s.atStall(r, cutOff, persistStalled, lostArm+5*time.Second, healAt, func() {})
		defer os.Remove(arm) //nolint:errcheck // disarmed below; this is for the error paths
		if err != nil {
			p.Heal()
			return err
		}
		heal := st.stopped
		r.Note("every persist of shard %d stalling %v after its fence UPDATE, armed %v before the heal; healed %v after the partition",
			s.shard, lostStall, heal.Sub(st.triggered).Round(10*time.Millisecond), heal.Sub(part).Round(10*time.Millisecond))
		// allocator.drop's line: "ordered shard dropped<TAB>{"shard": N, ...".
		drop, derr := a.WaitLog(st.off, fmt.Sprintf("ordered shard dropped\t{\"shard\": %d,", s.shard), lostDropWithin)
		if err := os.Remove(arm); err != nil {
			return err
		}
		if derr != nil {
			return fmt.Errorf("%s did not drop shard %d within %v of the heal: the scenario did not happen: %w", a.Name, s.shard, lostDropWithin, derr)
		}
		r.Note("%s dropped shard %d %v after the heal (%s); stalls stopped", a.Name, s.shard,
			time.Since(heal).Round(10*time.Millisecond), logTime.FindString(drop))
		if n := len(a.LogLines(st.off, "session expired")); n == 0 {
			r.Note("%s logged no expired session: the loss came another way", a.Name)
		}
		g := s.finish(r, s.others()[0], 5*time.Second, st.offs)
		assertGapless(r, g)
		late := metric(a, "idgen_ordered_owner_answers_after_loss_total")
		r.Note("%s answered %.0f requests after its term ended (persisted before); gapless holes no failed call explains: %d",
			a.Name, late, g.unexplained)
		if !neg && late <= 0 {
			return fmt.Errorf("%s answered nothing after its term ended (idgen_ordered_owner_answers_after_loss_total %.0f): no persist was in flight at the loss, the scenario did not happen", a.Name, late)
		}
		return nil
	}
}
