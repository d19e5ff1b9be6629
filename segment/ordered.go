package segment

import (
	"context"
	"errors"
	"fmt"
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
	// Logger receives refused ranges (nil: no logs).
	Logger *zap.Logger
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
// new key starts at biz.StartNum. With a requestID, a retry returns the
// range of the first success. Errors wrap ErrInvalid, ErrUnknownBiz,
// ErrRequestMismatch or ErrExhausted as the store reported them, ErrRegressed
// (with ErrUnavailable) for a range not above one already seen, and
// ErrUnavailable for everything else (store down, timeout).
func (o *Ordered) Take(ctx context.Context, biz Biz, subKey string, n int64, requestID string) (Range, error) {
	if n < 1 || n > MaxBatch {
		return Range{}, fmt.Errorf("%w: count %d out of range 1..%d", ErrInvalid, n, MaxBatch)
	}
	req, err := NormalizeOrderedRequest(OrderedRequest{
		Biz: biz.Name, SubKey: subKey, Count: n, StartNum: biz.StartNum, RequestID: requestID,
	})
	if err != nil {
		return Range{}, err
	}
	key := biz.Name + "\x00" + subKey
	// Snapshot before the call: anything seen by then was reserved before
	// this request, so a correct store answers above it. Comparing with
	// the value after the call would misfire when concurrent requests for
	// the key finish out of order.
	before := o.seen.get(key)

	ctx, cancel := context.WithTimeout(ctx, o.cfg.Timeout)
	defer cancel()
	o.requests.Add(1)
	var (
		r        Range
		replayed bool
	)
	if o.replay != nil {
		r, replayed, err = o.replay.ReserveOrderedReplay(ctx, req)
	} else {
		r, err = o.cfg.Store.ReserveOrdered(ctx, req)
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
	// Without replay reports, a retry's old range looks like a regression.
	guarded := requestID == "" || o.replay != nil
	if guarded && !replayed && r.First <= before {
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
	return r, nil
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
