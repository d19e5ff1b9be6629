// Package perrequest is ORDERED without shard owners: every request is
// one atomic reservation in the segment store (Store.ReserveOrdered), so
// any node can answer any key and nothing is held in memory but the
// regression guard's last-seen numbers. A node serves ORDERED this way
// when it has no ZooKeeper for the owners' leases (--mysql without --zk),
// and embedded users (examples/dateorder) use it directly. The shard
// owners that answer from memory are package ordered; both share the
// store's rows, so a cluster can move between them.
package perrequest

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/idgen/idgen/segment"
)

// Defaults for Config fields left zero.
const (
	DefaultTimeout = 2 * time.Second
	DefaultMaxKeys = 100_000
)

// Config configures a Processor. The zero value of every
// field but Store is a documented default.
type Config struct {
	// Store reserves the ranges. Required.
	Store segment.Store
	// Timeout bounds one request's store call, on top of the caller's
	// context (default 2s).
	Timeout time.Duration
	// MaxKeys bounds the (biz, sub key) pairs whose last number is kept
	// for the regression guard (default 100000, least recently used
	// evicted).
	MaxKeys int
	// Gate, when set, decides whether reservations may run now and
	// whether a finished one may be answered (the cluster's barrier after
	// a MySQL server change; package zkguard). Nil: always.
	Gate segment.Gate
	// Logger receives refused ranges (nil: no logs).
	Logger *zap.Logger
}

func (c Config) withDefaults() (Config, error) {
	switch {
	case c.Store == nil:
		return c, fmt.Errorf("%w: Config.Store is nil", segment.ErrInvalid)
	case c.Timeout < 0:
		return c, fmt.Errorf("%w: Config.Timeout %v is negative", segment.ErrInvalid, c.Timeout)
	case c.MaxKeys < 0:
		return c, fmt.Errorf("%w: Config.MaxKeys %d is negative", segment.ErrInvalid, c.MaxKeys)
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxKeys == 0 {
		c.MaxKeys = DefaultMaxKeys
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c, nil
}

// Processor serves the ORDERED channel: every request is one atomic store
// reservation, so numbers are strictly increasing per (biz, sub key) across
// the cluster. It keeps no buffer; its only state is the bounded last-seen
// map of the regression guard. It is safe for concurrent use.
type Processor struct {
	cfg    Config
	log    *zap.Logger
	replay segment.ReplayReporter // nil when the store cannot report replays
	seen   *lastSeen

	requests, failures, regressions atomic.Uint64
}

// Stats are the processor's counters, for metrics.
type Stats struct {
	Requests    uint64 // store calls made
	Failures    uint64 // calls that returned an error
	Regressions uint64 // ranges refused because the store went backwards
	Keys        int    // (biz, sub key) pairs remembered by the guard
}

// New returns a processor.
func New(cfg Config) (*Processor, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	o := &Processor{cfg: cfg, log: cfg.Logger, seen: newLastSeen(cfg.MaxKeys)}
	o.replay, _ = cfg.Store.(segment.ReplayReporter)
	return o, nil
}

// Take reserves n (1..segment.MaxBatch) consecutive numbers for (biz, subKey); a
// new key starts at biz.StartNum. With a request id, a retry (same id and
// scope, sub key and count) returns the range of the first success.
//
// The range is always above the highest number this node received for the
// key: the store raises a row that went backwards (a failover to a lagging
// replica) before reserving, in the same transaction as the request id, so
// neither this answer nor a retry's replay can repeat a number this node
// handed out. Errors wrap segment.ErrInvalid, ErrUnknownBiz,
// ErrRequestMismatch or ErrExhausted as the store reported them,
// ErrRegressed (with ErrUnavailable) for a store that ignored the raise,
// and ErrUnavailable for everything else (store down, timeout, the Gate
// closed).
func (o *Processor) Take(ctx context.Context, biz segment.Biz, subKey string, n int64, rid segment.RequestID) (segment.Range, error) {
	if n < 1 || n > segment.MaxBatch {
		return segment.Range{}, fmt.Errorf("%w: count %d out of range 1..%d", segment.ErrInvalid, n, segment.MaxBatch)
	}
	req, err := segment.NormalizeOrderedRequest(segment.OrderedRequest{
		Biz: biz.Name, SubKey: subKey, Count: n, StartNum: biz.StartNum, RequestID: rid.ID, RequestScope: rid.Scope,
	})
	if err != nil {
		return segment.Range{}, err
	}
	var token uint64
	if o.cfg.Gate != nil {
		if token, err = o.cfg.Gate.Enter(); err != nil {
			o.failures.Add(1)
			return segment.Range{}, orderedError(req, err)
		}
		req.Fence = func() error { return o.cfg.Gate.Check(token) }
	}
	key := biz.Name + "\x00" + subKey
	// Snapshot before the call: anything seen by then was reserved before
	// this request, so a correct store answers above it. Comparing with
	// the value after the call would misfire when concurrent requests for
	// the key finish out of order.
	before := o.seen.get(key)
	req.Above = before

	ctx, cancel := context.WithTimeout(ctx, o.cfg.Timeout)
	defer cancel()
	o.requests.Add(1)
	var r segment.Reservation
	if o.replay != nil {
		r, err = o.replay.ReserveOrderedReplay(ctx, req)
	} else {
		r.Range, err = o.cfg.Store.ReserveOrdered(ctx, req)
	}
	if err != nil {
		o.failures.Add(1)
		return segment.Range{}, orderedError(req, err)
	}
	if r.First < 1 || r.Len() != n {
		o.failures.Add(1)
		return segment.Range{}, fmt.Errorf("segment: biz %q sub key %q: %w: store returned %d..%d for a request of %d",
			biz.Name, subKey, segment.ErrUnavailable, r.First, r.Last, n)
	}
	if r.Raised {
		o.regressions.Add(1)
		o.log.Warn("ordered row went backwards in the store; raised above the highest number received",
			zap.String("biz", biz.Name), zap.String("sub_key", subKey), zap.Int64("highest_received", before),
			zap.Int64("first", r.First), zap.Int64("last", r.Last))
	}
	// A replay is the stored answer of an earlier request (possibly
	// served by another node before this node's later ones), so it is not
	// compared with what this node saw; it was guarded when it was stored.
	// A new reservation must be above: every store honours Above, so this
	// only catches a store that does not.
	// (Without replay reports a retry's old range cannot be told from a
	// regression, so requests with an id are not checked then.)
	guarded := o.replay != nil || rid.ID == ""
	if guarded && !r.Replayed && r.First <= before {
		o.failures.Add(1)
		o.regressions.Add(1)
		err := fmt.Errorf("segment: biz %q sub key %q: store returned %d..%d, not above %d already received: %w",
			biz.Name, subKey, r.First, r.Last, before, segment.ErrRegressed)
		o.log.Error("ordered range refused: store went backwards", zap.String("biz", biz.Name),
			zap.String("sub_key", subKey), zap.Int64("first", r.First), zap.Int64("last", r.Last),
			zap.Int64("highest_received", before), zap.Error(err))
		return segment.Range{}, fmt.Errorf("%w: %w", segment.ErrUnavailable, err)
	}
	o.seen.raise(key, r.Last)
	if o.cfg.Gate != nil {
		// Published, then checked again: the store's fence check passed
		// before the commit, but the gate may have closed since and the
		// barrier read Remembered without this range (issue 29 hole a).
		// Passing here, the range was remembered before the gate closed,
		// so the barrier raises it on the new server; failing, it is a
		// gap.
		if err := o.cfg.Gate.Check(token); err != nil {
			o.failures.Add(1)
			return segment.Range{}, orderedError(req, err)
		}
	}
	return r.Range, nil
}

// Remembered calls fn for every (biz, sub key) whose last number this node
// remembers, with that number: what the cluster's barrier pushes into a
// new MySQL server after a failover (zkguard). A range is remembered
// before Take answers it and before its last gate check, so a barrier that
// starts after the gate closed sees every range answered under the old
// token (each request reserves exactly what it answers: the range's end is
// the reservation's end).
func (o *Processor) Remembered(fn func(biz, subKey string, last int64)) {
	o.seen.each(func(key string, last int64) {
		biz, sub, _ := strings.Cut(key, "\x00")
		fn(biz, sub, last)
	})
}

// orderedError keeps the sentinels a caller acts on and turns everything
// else into segment.ErrUnavailable.
func orderedError(req segment.OrderedRequest, err error) error {
	for _, keep := range []error{segment.ErrUnknownBiz, segment.ErrInvalid, segment.ErrRequestMismatch, segment.ErrExhausted} {
		if errors.Is(err, keep) {
			return err
		}
	}
	return fmt.Errorf("segment: biz %q sub key %q: %w: %w", req.Biz, req.SubKey, segment.ErrUnavailable, err)
}

// Stats returns the processor's counters.
func (o *Processor) Stats() Stats {
	return Stats{
		Requests: o.requests.Load(), Failures: o.failures.Load(),
		Regressions: o.regressions.Load(), Keys: o.seen.len(),
	}
}
