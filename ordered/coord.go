package ordered

import (
	"context"
	"time"
)

// Clock is the time the lease rules are computed in. It must be monotonic
// (time.Now's monotonic reading; never the node's shiftable wall clock):
// a lease is a duration measured on one machine.
type Clock interface {
	Now() time.Time
}

// SystemClock is time.Now.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// WallClock is time.Now without its monotonic reading: times from it
// compare on the wall clock.
type WallClock struct{}

// Now returns time.Now().Round(0).
func (WallClock) Now() time.Time { return time.Now().Round(0) }

// DefaultWall is the wall clock that goes with clk: WallClock for the
// system's clock (nil), clk itself for any other (a fake drives both).
// The allocator and the coordinators (package zkown) default to it.
func DefaultWall(clk Clock) Clock {
	if _, system := clk.(SystemClock); clk == nil || system {
		return WallClock{}
	}
	return clk
}

// WallBefore reports whether a is before b on their wall clock readings
// (a monotonic reading, if either has one, is ignored): the lease's end
// on the wall clock is compared with it by the allocator and by the
// coordinators (zkown).
func WallBefore(a, b time.Time) bool { return a.Round(0).Before(b.Round(0)) }

// Grant is this node's ownership of one shard for one epoch.
type Grant struct {
	Shard int
	// Epoch is strictly greater than every earlier owner's epoch of the
	// shard (the coordinator's counter, e.g. in ZooKeeper).
	Epoch int64
	// NotBefore is the end of the lease wait: the previous owner can no
	// longer answer after it. No answer of this grant before it.
	NotBefore time.Time
	// From is the previous owner's address, when the shard was taken
	// over from one ("" when it was released, or had none), and
	// NotBeforeWall is NotBefore on the wall clock: both only for the
	// refusals of the lease wait, which tell a caller (and whoever reads
	// its logs) whose lease runs until when.
	From          string
	NotBeforeWall time.Time
	// CheckLease: the claim must find the shard's store lease nonce still
	// Observed (LeaseStore.ClaimObserved): the coordinator saw it
	// unchanged for a lease, and an owner that renewed through the store
	// since is alive. False when there is nothing to check (no LeaseStore,
	// a predecessor proven dead, the lease wait switched off).
	CheckLease bool
	Observed   string
}

// Handler is told about ownership changes by the Coordinator. The
// Allocator is the Handler.
type Handler interface {
	// Acquire: this node owns g.Shard at g.Epoch. The handler claims the
	// epoch in the store (fencing the previous owner's persists) and
	// serves from g.NotBefore on. An error (the claim failed: store down,
	// or a higher epoch is stored) makes the coordinator give the shard up
	// and try again later.
	Acquire(ctx context.Context, g Grant) error
	// Release is a planned hand-off: the handler stops answering for the
	// shard, waits for its answers in flight, and writes back the exact
	// counters (fenced), so the hand-off leaves no gap. The coordinator
	// releases the shard when Release returns, except:
	//   - ErrHandOffDeferred: nothing changed, the handler still serves
	//     the shard; the coordinator keeps it and tries again later (a
	//     coordinator that leaves passes a Leaving context, and Release
	//     then waits instead, bounded by ctx);
	//   - ErrUncleanHandOff: the handler stopped, but the store may hold
	//     less than it handed out; the release carries a lease wait.
	// Any other error leaves the reservations as a gap, never a duplicate.
	Release(ctx context.Context, shard int) error
	// Lost: the shard is no longer this node's (taken over, or the lease
	// could not be renewed). The handler stops answering at once and
	// forgets the shard's keys; nothing is written back.
	Lost(shard int)
}

// Owner is one shard's owner as this node knows it.
type Owner struct {
	Shard int
	Addr  string // RPC host:port; "" while the shard has no owner
	Epoch int64
	Self  bool
}

// Coordinator decides which node owns which shard.
type Coordinator interface {
	// Start begins taking part in the cluster; from then on the
	// coordinator calls h as shards are gained and lost.
	Start(ctx context.Context, h Handler) error
	// Owner returns the shard's owner as last seen.
	Owner(shard int) Owner
	// ValidUntil is the end of this node's lease: no answer at or after
	// it (zero: no lease). It moves forward with every renewal.
	ValidUntil() time.Time
	// ValidUntilWall is the same end on the wall clock (Config.Wall):
	// the lease ends at whichever comes first. A frozen VM's monotonic
	// clock loses the freeze, its wall clock does not; the owners that
	// take its shards over count on theirs.
	ValidUntilWall() time.Time
	// Fenced: the handler stopped serving the shard because the store
	// refused its epoch (a newer owner claimed it: ZooKeeper lost the
	// shard's history, or a second cluster uses the same database). The
	// coordinator no longer counts the shard as held, so it gives the
	// shard up or claims it again above the store's epoch; without this
	// the node would keep the shard's lease and nobody would serve it.
	Fenced(shard int, epoch int64)
	// Close hands every owned shard off (Handler.Release), releases them
	// and leaves the cluster.
	Close(ctx context.Context) error
}
