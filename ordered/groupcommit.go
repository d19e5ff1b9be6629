package ordered

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// committer merges the persists of every shard of the node into group
// commits (Store.PersistShards): one transaction carries the pending
// round of each shard that has one, so a node with many busy shards pays
// one transaction's round trips and one durable flush per round instead
// of one per shard. Up to depth transactions run at once (pipelined: a
// transaction holds its shards' fence rows only until its commit, and the
// store merges the flushes of those in flight); a shard has at most one
// part in a transaction, and a persist that arrives while all depth run
// waits for the next one, which then carries everything queued.
//
// Each part keeps its own fencing and its own outcome: the store commits
// the parts whose shard epoch and request ids pass and refuses the
// others alone, so one fenced shard fails only its own requests.
type committer struct {
	store   Store
	depth   int
	timeout time.Duration

	mu      sync.Mutex
	queue   []*commitJob
	running int // transactions in flight (each a goroutine of run)
}

// commitJob is one shard's persist waiting for its group commit.
type commitJob struct {
	part ShardWrite
	done chan error // cap 1
}

func newCommitter(store Store, depth int, timeout time.Duration) *committer {
	return &committer{store: store, depth: depth, timeout: timeout}
}

// persist commits part in a group commit and returns its own outcome (as
// Store.Persist would). ctx bounds the wait: when it ends first the part
// may still commit later (a gap, as a persist that timed out at its
// commit may have committed).
func (c *committer) persist(ctx context.Context, part ShardWrite) error {
	j := &commitJob{part: part, done: make(chan error, 1)}
	c.mu.Lock()
	c.queue = append(c.queue, j)
	start := c.running < c.depth
	if start {
		c.running++
	}
	c.mu.Unlock()
	if start {
		go c.run()
	}
	select {
	case err := <-j.done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("waiting for the group commit: %w", ctx.Err())
	}
}

// run commits batches of the queue until it is empty.
func (c *committer) run() {
	for {
		c.mu.Lock()
		batch := c.takeLocked()
		if len(batch) == 0 {
			c.running--
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		parts := make([]ShardWrite, len(batch))
		for i, j := range batch {
			parts[i] = j.part
		}
		ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
		errs, err := c.store.PersistShards(ctx, parts)
		cancel()
		for i, j := range batch {
			if err != nil {
				j.done <- err
			} else {
				j.done <- errs[i]
			}
		}
	}
}

// takeLocked removes the next batch from the queue, in arrival order: at
// most one part per shard, and no request id in two parts (the store
// would refuse the later one as malformed; as its own transaction it is
// refused as a duplicate and replayed, as without group commits). What
// does not fit stays queued for the next transaction. Called with c.mu
// held.
func (c *committer) takeLocked() []*commitJob {
	if len(c.queue) == 0 {
		return nil
	}
	var (
		batch  []*commitJob
		keep   = c.queue[:0]
		shards = map[int]struct{}{}
		reqs   map[RequestKey]struct{}
	)
	for _, j := range c.queue {
		if _, twice := shards[j.part.Shard]; twice || overlaps(reqs, j.part.Reqs) {
			keep = append(keep, j)
			continue
		}
		shards[j.part.Shard] = struct{}{}
		for _, q := range j.part.Reqs {
			if reqs == nil {
				reqs = map[RequestKey]struct{}{}
			}
			reqs[q.key()] = struct{}{}
		}
		batch = append(batch, j)
	}
	clear(c.queue[len(keep):])
	c.queue = keep
	return batch
}

func overlaps(set map[RequestKey]struct{}, reqs []Request) bool {
	for _, q := range reqs {
		if _, ok := set[q.key()]; ok {
			return true
		}
	}
	return false
}
