// Package worker assigns the 10-bit snowflake worker ID (IDC bits + node
// bits) to a node and keeps the rules of DESIGN.md that make snowflake IDs
// unique across crashes, restarts and ZooKeeper session loss.
//
// A Lease is the node's claim on one worker slot. It tells its Holder (the
// snowflake side of the service) when a slot is acquired, how far the slot's
// high-water mark has been extended, and when the claim is lost. The Holder
// issues snowflake IDs only between Acquired and Fenced, only with
// timestamps above Slot.NotBefore and not above the last extended high-water
// mark.
//
// The invariant: a slot's next holder issues only timestamps above every
// timestamp an earlier holder may issue. Three rules keep it, whatever the
// network or the scheduler does:
//
//  1. A holder never issues a timestamp above the high-water mark it has
//     durably written (ZooKeeper's last/<node> and the properties file):
//     Holder.Extended is called only after the write succeeded, and the
//     generator's ceiling refuses beyond it.
//  2. Mark writes are conditional on the znode version the lease last saw.
//     A write queued under a session that then expired, landing after the
//     slot's next holder wrote its own mark, fails (and the old holder
//     fences) instead of lowering the mark below what the new holder uses.
//  3. A holder that takes a slot starts above the slot's recorded mark
//     (Slot.NotBefore; the holder refuses, with the time left, until its
//     clock passes it).
//
// A paused process resumed after its slot was taken still issues only up
// to its own durable mark, which the taker started above; a partitioned
// holder does the same, stopping at its mark; a lost reply or late write
// cannot lower a mark (2). So uniqueness never depends on a node noticing
// in time that it lost ZooKeeper, and connection loss does not fence: the
// node rides out an outage up to OutageTolerance by writing marks that far
// ahead (see Config.Lead). What that lead costs: a crashed holder's slot is
// free for others only after about Lead, which is why a crash-restarted
// node takes another slot whose mark has passed, and a slot whose mark was
// lost with ZooKeeper's state is taken only Lead after the cluster was
// re-created.
//
// Register is the ZooKeeper lease (ZKLease), Standalone the lease of a node
// without ZooKeeper (StandaloneLease). ListWorkers and WatchWorkers show
// the assignments to operators (idctl workers, the ListWorkers RPC).
package worker

import (
	"context"
	"time"
)

// Slot is a worker slot held by this node.
type Slot struct {
	IDC    int
	Node   int
	Worker int // IDC<<NodeBits | Node
	// NotBefore is a Unix millisecond that previous holders of the slot may
	// have used: issue no ID whose timestamp is <= NotBefore.
	NotBefore int64
	// MarkNotBefore is the part of NotBefore that comes from the slot's
	// own marks; NotBefore is larger when the cluster was restored or its
	// ZooKeeper ensemble changed epoch within the last lead (marks written
	// before may have been lost). For logs and fault injection.
	MarkNotBefore int64
	// HighWater is the Unix millisecond already recorded (ZooKeeper and/or
	// the properties file) as the slot's high-water mark: issue no ID whose
	// timestamp is > HighWater until Extended raises it.
	HighWater int64
}

// Holder receives the lease's state changes. The lease calls these methods
// from its own goroutine, one at a time; they must not block for long.
type Holder interface {
	// Acquired: the slot is held; issue IDs within (NotBefore, HighWater].
	Acquired(s Slot)
	// Extended: the slot's high-water mark was durably raised to highWater.
	Extended(highWater int64)
	// Fenced: stop issuing IDs now; reason says why (logged, shown to callers).
	Fenced(reason error)
	// LastUsed returns the highest Unix millisecond used in an issued ID
	// (0 if none), written as the exact high-water mark on clean shutdown.
	LastUsed() int64
}

// State is what the lease reports to metrics and readiness.
type State string

// Lease states.
const (
	StateNone       State = "none"       // no slot (starting, or refused)
	StateRegistered State = "registered" // slot held, ZooKeeper session alive (or standalone)
	StateDegraded   State = "degraded"   // cached slot in use while ZooKeeper is unreachable
	StateFenced     State = "fenced"     // slot claim lost or uncertain: not issuing
)

// Meta is the cluster-wide snowflake configuration stored in ZooKeeper at
// cluster creation (or, standalone, derived from the data directory).
type Meta struct {
	EpochMs   int64 `json:"epoch_ms"`
	IDCBits   int   `json:"idc_bits"`
	NodeBits  int   `json:"node_bits"`
	CreatedMs int64 `json:"created_ms"`
}

// Lease is a node's claim on a worker slot.
type Lease interface {
	// Meta returns the cluster settings the slot belongs to.
	Meta() Meta
	// State returns the current state.
	State() State
	// Slot returns the slot currently held; ok is false while none is held.
	Slot() (s Slot, ok bool)
	// Close stops heartbeats, writes the holder's exact last used
	// millisecond as the high-water mark and releases the slot.
	Close(ctx context.Context) error
	// RequestExtend asks for the next high-water mark to be written now
	// rather than at the next heartbeat (the holder's clock is near or past
	// the mark, e.g. after a forward clock step). It never blocks.
	RequestExtend()
}

// DefaultHeartbeatInterval is how often the high-water mark is written ahead.
const DefaultHeartbeatInterval = 3 * time.Second
