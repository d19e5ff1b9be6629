package segment

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// Defaults for OrderedConfig fields left zero.
const (
	DefaultOrderedTimeout = 2 * time.Second
	DefaultOrderedMaxKeys = 100_000
)

// OrderedConfig configures an Ordered processor. The zero value of every
// field but Store is a documented default.
type OrderedConfig struct {
	// Store reserves the ranges. Required.
	Store Store
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
	Gate Gate
	// Logger receives refused ranges (nil: no logs).
	Logger *zap.Logger
}

// Gate holds ORDERED reservations back while the cluster repairs the store
// after the MySQL server behind the connection changed (a failover): the
// new server may have lost reservations that some node served and still
// remembers, so no node may reserve on it before every node has raised
// the rows it remembers.
//
// The token changes whenever the gate closes (and stays the same when it
// opens again): a number reserved under one token may be answered from
// memory only while Enter still returns that token (package ordered's
// cached reservations), and the barrier reads Remembered only after the
// token changed. Enter is on the hot path of cached answers: keep it cheap.
type Gate interface {
	// Enter returns a token when reservations may run, or an error
	// wrapping ErrUnavailable (retryable) while the gate is closed.
	Enter() (token uint64, err error)
	// Check returns nil when a reservation started with token may still
	// be committed and answered: the gate has not closed since.
	Check(token uint64) error
}

func (c OrderedConfig) withDefaults() (OrderedConfig, error) {
	switch {
	case c.Store == nil:
		return c, fmt.Errorf("%w: OrderedConfig.Store is nil", ErrInvalid)
	case c.Timeout < 0:
		return c, fmt.Errorf("%w: OrderedConfig.Timeout %v is negative", ErrInvalid, c.Timeout)
	case c.MaxKeys < 0:
		return c, fmt.Errorf("%w: OrderedConfig.MaxKeys %d is negative", ErrInvalid, c.MaxKeys)
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultOrderedTimeout
	}
	if c.MaxKeys == 0 {
		c.MaxKeys = DefaultOrderedMaxKeys
	}
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return c, nil
}

// Ordered serves the ORDERED channel: every request is one atomic store
// reservation, so numbers are strictly increasing per (biz, sub key) across
// the cluster. It keeps no buffer; its only state is the bounded last-seen
// map of the regression guard. It is safe for concurrent use.
type Ordered struct {
	cfg    OrderedConfig
	log    *zap.Logger
	replay ReplayReporter // nil when the store cannot report replays
	seen   *lastSeen

	requests, failures, regressions atomic.Uint64
}

// OrderedStats are the processor's counters, for metrics.
type OrderedStats struct {
	Requests    uint64 // store calls made
	Failures    uint64 // calls that returned an error
	Regressions uint64 // ranges refused because the store went backwards
	Keys        int    // (biz, sub key) pairs remembered by the guard
}

// NewOrdered returns a processor.
func NewOrdered(cfg OrderedConfig) (*Ordered, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	o := &Ordered{cfg: cfg, log: cfg.Logger, seen: newLastSeen(cfg.MaxKeys)}
	o.replay, _ = cfg.Store.(ReplayReporter)
	return o, nil
}

// Take reserves n (1..MaxBatch) consecutive numbers for (biz, subKey); a
// new key starts at biz.StartNum. With a request id, a retry (same id and
// scope, sub key and count) returns the range of the first success.
//
// The range is always above the highest number this node received for the
// key: the store raises a row that went backwards (a failover to a lagging
// replica) before reserving, in the same transaction as the request id, so
// neither this answer nor a retry's replay can repeat a number this node
// handed out. Errors wrap ErrInvalid, ErrUnknownBiz, ErrRequestMismatch or
// ErrExhausted as the store reported them, ErrRegressed (with
// ErrUnavailable) for a store that ignored the raise, and ErrUnavailable
// for everything else (store down, timeout, the Gate closed).
func (o *Ordered) Take(ctx context.Context, biz Biz, subKey string, n int64, rid RequestID) (Range, error) {
	if n < 1 || n > MaxBatch {
		return Range{}, fmt.Errorf("%w: count %d out of range 1..%d", ErrInvalid, n, MaxBatch)
	}
	req, err := NormalizeOrderedRequest(OrderedRequest{
		Biz: biz.Name, SubKey: subKey, Count: n, StartNum: biz.StartNum, RequestID: rid.ID, RequestScope: rid.Scope,
	})
	if err != nil {
		return Range{}, err
	}
	var token uint64
	if o.cfg.Gate != nil {
		if token, err = o.cfg.Gate.Enter(); err != nil {
			o.failures.Add(1)
			return Range{}, orderedError(req, err)
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
	var r Reservation
	if o.replay != nil {
		r, err = o.replay.ReserveOrderedReplay(ctx, req)
	} else {
		r.Range, err = o.cfg.Store.ReserveOrdered(ctx, req)
	}
	if err != nil {
		o.failures.Add(1)
		return Range{}, orderedError(req, err)
	}
	if r.First < 1 || r.Len() != n {
		o.failures.Add(1)
		return Range{}, fmt.Errorf("segment: biz %q sub key %q: %w: store returned %d..%d for a request of %d",
			biz.Name, subKey, ErrUnavailable, r.First, r.Last, n)
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
			biz.Name, subKey, r.First, r.Last, before, ErrRegressed)
		o.log.Error("ordered range refused: store went backwards", zap.String("biz", biz.Name),
			zap.String("sub_key", subKey), zap.Int64("first", r.First), zap.Int64("last", r.Last),
			zap.Int64("highest_received", before), zap.Error(err))
		return Range{}, fmt.Errorf("%w: %w", ErrUnavailable, err)
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
			return Range{}, orderedError(req, err)
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
func (o *Ordered) Remembered(fn func(biz, subKey string, last int64)) {
	o.seen.each(func(key string, last int64) {
		biz, sub, _ := strings.Cut(key, "\x00")
		fn(biz, sub, last)
	})
}

// orderedError keeps the sentinels a caller acts on and turns everything
// else into ErrUnavailable.
func orderedError(req OrderedRequest, err error) error {
	for _, keep := range []error{ErrUnknownBiz, ErrInvalid, ErrRequestMismatch, ErrExhausted} {
		if errors.Is(err, keep) {
			return err
		}
	}
	return fmt.Errorf("segment: biz %q sub key %q: %w: %w", req.Biz, req.SubKey, ErrUnavailable, err)
}

// Stats returns the processor's counters.
func (o *Ordered) Stats() OrderedStats {
	return OrderedStats{
		Requests: o.requests.Load(), Failures: o.failures.Load(),
		Regressions: o.regressions.Load(), Keys: o.seen.len(),
	}
}
