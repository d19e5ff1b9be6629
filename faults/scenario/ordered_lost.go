package scenario

import (
	"fmt"
	"time"

	"github.com/idgen/idgen/faults/harness"
)

// The real-server scenario of issue 31's answers after a lost shard
// (ordered.Allocator.answerable): an owner loses the hot shard while a
// gapless persist of it is in flight, and the persist then commits under
// the owner's epoch. Made to happen on every run by stalling the persist
// inside its transaction, after its fence UPDATE, across the loss.

const (
	// lostStall is how long the owner's persist stalls after its fence
	// UPDATE (IDGEN_FAULT_ORDERED_PERSIST_STALL, a plain sleep: the node
	// keeps running). It outlasts the owner's lease once it is cut off
	// from ZooKeeper (ordLease, 1 s: its store renewal waits on the same
	// fence row, so nothing renews it), and the others' takeover (one
	// lease of a stale znode and lease nonce), so the new owner's claim
	// queues on the fence row behind the stalled transaction.
	lostStall = 3 * time.Second
	// lostStoreTimeout is the nodes' --store-timeout: the stalled persist
	// commits within its deadline (one store timeout from its start), and
	// so does the new owner's claim waiting on the row. With the default
	// 2 s the stall would outlast the persist's deadline and its commit
	// fail: nothing durable, nothing to answer. The session idle limit
	// (twice this, internal/mysqldb.SessionIdleLimit) stays far above the
	// stall.
	lostStoreTimeout = 5 * time.Second
	// lostPartFor is how long the owner stays cut off from ZooKeeper:
	// past the stall and past its 3 s session, so the takeover is
	// complete before it comes back.
	lostPartFor = 6 * time.Second
)

// orderedAnswerAfterLoss: the hot shard's owner A reaches ZooKeeper
// through a proxy. Under ORDERED load A's next persist of the hot shard
// stalls for lostStall after its fence UPDATE, holding the shard's fence
// row; at once A is silently partitioned from ZooKeeper. A's lease runs
// out within a lease (its ZooKeeper renewals are cut, its store renewal
// queues on the fence row its own stalled transaction holds): "ORDERED
// lease ran out", the hot shard lost (its term aborted) with the persist
// in flight. The others take the shard over in ZooKeeper, and the new
// owner's claim queues on the fence row. The stall ends, the persist
// commits under A's epoch, the claim gets the row and the new owner loads
// above the committed numbers. A must answer them
// (idgen_ordered_owner_answers_after_loss_total > 0 on A: the scenario
// errs when it stays 0, the loss did not happen with a persist in flight)
// and the gapless business must show no hole failed calls do not explain.
// The partition heals lostPartFor after it began.
//
// neg (IDGEN_FAULT_ORDERED_REFUSE_AFTER_LOSS=1 on every node: the
// behaviour before issue 31's fix): the abort fails the persist's waiters
// at once ("ownership lost", ridden out and retried or forwarded), the
// numbers commit anyway, and nobody answered them: gapless holes no failed
// call explains, the violation the control fails by.
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
		o := ordOpts{Victim: 1, ClusterOpts: ClusterOpts{ZK: map[int]string{1: p.Addr},
			Args: []string{"--store-timeout", lostStoreTimeout.String()}}}
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
		st, err := s.atStall(r, armPersistStall(arm, s.shard, lostStall), persistStalled, 10*time.Second, p.Partition, p.Heal)
		if err != nil {
			return err
		}
		if p.Active() == 0 {
			p.Heal()
			return fmt.Errorf("%s has no connection through its ZooKeeper proxy: the scenario cannot happen", a.Name)
		}
		part := st.stopped
		r.Note("%s (owner of shard %d) stalled a persist after its fence UPDATE for %v; partitioned from ZooKeeper %v later",
			a.Name, s.shard, lostStall, part.Sub(st.triggered).Round(time.Millisecond))
		lapse, lerr := a.WaitLog(st.off, "ORDERED lease ran out", lostStall)
		if lerr != nil {
			p.Heal()
			return fmt.Errorf("%s's lease did not run out within the stall (%v): the scenario did not happen: %w", a.Name, lostStall, lerr)
		}
		r.Note("%s's lease ran out %v into the partition, the stall still holding the fence row (%s)", a.Name,
			time.Since(part).Round(10*time.Millisecond), logTime.FindString(lapse))
		b, werr := s.waitOwner(s.others(), []*harness.Node{a}, lostPartFor-time.Since(part))
		if werr == nil {
			took := time.Since(part)
			how := "its claim queued on the fence row until the stalled persist committed"
			if took > lostStall {
				how = "after the stalled persist committed"
			}
			r.Note("shard %d owned (ZooKeeper) by %s %v into the partition: %s", s.shard, b.Name, took.Round(10*time.Millisecond), how)
		} else {
			r.Note("shard %d not taken over during the partition: %v", s.shard, werr)
			b = s.others()[0]
		}
		sleepUntil(part.Add(lostPartFor))
		p.Heal()
		r.Note("healed %v after the partition", time.Since(part).Round(100*time.Millisecond))
		g := s.finish(r, b, 5*time.Second, st.offs)
		assertGapless(r, g)
		late := metric(a, "idgen_ordered_owner_answers_after_loss_total")
		r.Note("%s answered %.0f requests after its term ended (persisted before); gapless holes no failed call explains: %d",
			a.Name, late, g.unexplained)
		if !neg && late <= 0 {
			return fmt.Errorf("%s answered nothing after its term ended (idgen_ordered_owner_answers_after_loss_total %.0f): the loss did not happen with a persist in flight", a.Name, late)
		}
		return nil
	}
}
