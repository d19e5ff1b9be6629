package zkown

import (
	"context"
	"sync"
)

// claimParallel is how many takeovers of one round run at once.
//
// Each takeover is a ZooKeeper compare-and-set and a store claim (a MySQL
// transaction on the shard's fence row, or a bbolt write): one after
// another, the first node of a new cluster took 64 of them in a row
// before its last shard served (issue 31). The takeovers of one round are
// of distinct shards and touch only their own shard's state (the per-shard
// arrays, the view and held maps under c.mu), so they are independent;
// bounded so a round never opens more store connections or ZooKeeper
// requests than a few.
const claimParallel = 8

// runTakeovers runs the round's takeovers (each one c.takeover call, its
// arguments read when it runs, as they were when the round ran them one by
// one), at most claimParallel at once, and returns when all are done. The
// rules of a takeover are its own and unchanged: the compare-and-set on
// the version read, NotBefore, and the lease running without a break from
// before the compare-and-set to after it (the term is read before and
// compared after, per takeover). A coordinator that stops starts no new
// one. What became of each takeover goes to the coordinator's claim
// summary (summary.go).
func (c *Coordinator) runTakeovers(ctx context.Context, takes []func() claim) {
	if len(takes) == 0 {
		return
	}
	c.sum.begin(c.cfg.Clock.Now())
	next := make(chan func() claim)
	var wg sync.WaitGroup
	for range min(claimParallel, len(takes)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for take := range next {
				c.sum.add(take())
			}
		}()
	}
	for _, take := range takes {
		if c.stopping() || ctx.Err() != nil {
			break
		}
		next <- take
	}
	close(next)
	wg.Wait()
	c.sum.end(c.cfg.Clock.Now())
}
