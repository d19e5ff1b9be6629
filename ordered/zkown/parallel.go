package zkown

import (
	"context"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"
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

// claim is what became of one takeover, for its round's summary: taken
// (granted to the handler, which accepted it, after leaseWait), failed (a
// warning said why), or neither (not tried: backing off, the lease broke,
// another node's compare-and-set came first, the coordinator closes).
type claim struct {
	shard     int
	why       string
	taken     bool
	failed    bool
	leaseWait time.Duration
}

// roundClaims sums a round's claims, which finish on several goroutines
// at once, into the round's one summary line: a node that claims 64
// shards says so once, and each shard's line is at debug.
type roundClaims struct {
	mu          sync.Mutex
	taken       []int
	failed      int
	why         map[string]int
	longestWait time.Duration
}

func (r *roundClaims) add(cl claim) {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case cl.taken:
		r.taken = append(r.taken, cl.shard)
		r.why[cl.why]++
		r.longestWait = max(r.longestWait, cl.leaseWait)
	case cl.failed:
		r.failed++
	}
}

// runTakeovers runs the round's takeovers (each one c.takeover call, its
// arguments read when it runs, as they were when the round ran them one by
// one), at most claimParallel at once, and returns when all are done. The
// rules of a takeover are its own and unchanged: the compare-and-set on
// the version read, NotBefore, and the lease running without a break from
// before the compare-and-set to after it (the term is read before and
// compared after, per takeover). A coordinator that stops starts no new
// one. A round that took or failed to take a shard ends with one line
// saying which and how many, why (per reason: released, stale owner ID,
// ...), the longest lease wait among them and how long the round's claims
// took.
func (c *Coordinator) runTakeovers(ctx context.Context, takes []func() claim) {
	if len(takes) == 0 {
		return
	}
	start := time.Now()
	sum := roundClaims{why: map[string]int{}}
	next := make(chan func() claim)
	var wg sync.WaitGroup
	for range min(claimParallel, len(takes)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for take := range next {
				sum.add(take())
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
	if len(sum.taken)+sum.failed > 0 {
		slices.Sort(sum.taken)
		c.log.Info("ORDERED shards taken", zap.Int("count", len(sum.taken)), zap.Ints("shards", sum.taken), zap.Int("failed", sum.failed), zap.Any("why", sum.why),
			zap.Duration("longest_lease_wait", sum.longestWait), zap.Duration("took", time.Since(start)))
	}
}
