package ordered

import (
	"context"
	"errors"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/idgen/idgen/segment"
)

// farFuture is the lease of a node that owns every shard by construction.
var farFuture = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// Local is the Coordinator of a standalone node: it owns every shard for
// the life of the process, with no lease to renew. The embedded store
// admits one process per data directory, so no other owner can exist.
// Each start is a new epoch (its start time in ms), so terms are told
// apart in the store like a cluster's.
type Local struct {
	self   string
	epoch  int64
	epochs [segment.OrderedShards]int64 // per shard, set by Start
	h      Handler
}

// NewLocal returns the coordinator of a standalone node at self.
func NewLocal(self string) *Local {
	return &Local{self: self, epoch: time.Now().UnixMilli()}
}

// Start acquires every shard at once (no lease wait: there is no other
// owner to wait for), localClaimParallel claims at a time: the embedded
// store commits concurrent claims in one write (bbolt's Batch), so the
// node does not wait for 64 commits in a row before it serves (issue 31).
// Each shard's epochs[s] is written by its own claim only.
func (l *Local) Start(ctx context.Context, h Handler) error {
	l.h = h
	var g errgroup.Group
	g.SetLimit(localClaimParallel)
	for s := range segment.OrderedShards {
		g.Go(func() error {
			epoch := l.epoch
			err := h.Acquire(ctx, Grant{Shard: s, Epoch: epoch})
			var fe *FencedError
			if errors.As(err, &fe) {
				// The store holds a later epoch (this machine's clock is
				// behind an earlier start's): claim above it.
				epoch = fe.Stored + 1
				err = h.Acquire(ctx, Grant{Shard: s, Epoch: epoch})
			}
			if err != nil {
				return fmt.Errorf("ordered: standalone node acquiring shard %d: %w", s, err)
			}
			l.epochs[s] = epoch
			return nil
		})
	}
	return g.Wait()
}

// localClaimParallel is how many shard claims a standalone node's Start
// runs at once.
const localClaimParallel = 16

// Owner returns this node for every shard.
func (l *Local) Owner(shard int) Owner {
	epoch := l.epoch
	if shard >= 0 && shard < len(l.epochs) && l.epochs[shard] != 0 {
		epoch = l.epochs[shard]
	}
	return Owner{Shard: shard, Addr: l.self, Epoch: epoch, Self: true}
}

// Owners returns every shard's owner (this node).
func (l *Local) Owners() []Owner {
	out := make([]Owner, segment.OrderedShards)
	for i := range out {
		out[i] = l.Owner(i)
	}
	return out
}

// Fenced does nothing: the embedded store admits one process per data
// directory, so no other owner can fence a standalone node's shards.
func (l *Local) Fenced(int, int64) {}

// ValidUntil never runs out.
func (l *Local) ValidUntil() time.Time { return farFuture }

// ValidUntilWall implements Coordinator: never.
func (l *Local) ValidUntilWall() time.Time { return farFuture }

// Close hands every shard off: the exact counters are written back, so a
// restart continues without a gap.
func (l *Local) Close(ctx context.Context) error {
	if l.h == nil {
		return nil
	}
	var first error
	ctx = Leaving(ctx)
	for s := range segment.OrderedShards {
		if err := l.h.Release(ctx, s); err != nil && first == nil {
			first = err
		}
	}
	return first
}
