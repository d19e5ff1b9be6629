package server

import (
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/idgen/idgen/internal/logevery"
	"github.com/idgen/idgen/ordered"
	"github.com/idgen/idgen/segment"
)

// shardHealth tracks the ORDERED shards without a serving owner as this
// node sees them (ordered.Unserved): for /readyz?channel=ordered and the
// idgen_ordered_shards_unserved gauge. A shard counts once it has been
// unserved for grace: a hand-off or a takeover's lease wait leaves a shard
// unserved for up to about two leases in normal operation, and readiness
// must not flap with every one of them. A shard that stays unserved (a
// fenced owner that kept its lease, a claim that keeps failing, no node
// taking it) is an outage of its keys that nothing else shows: every
// other shard, and every other channel, keeps serving.
type shardHealth struct {
	grace atomic.Int64 // time.Duration
	check func() []int // the shards unserved now
	log   *zap.Logger
	warn  *logevery.Limiter

	mu    sync.Mutex
	since [segment.OrderedShards]time.Time // zero: served at the last look

	stop chan struct{}
	once sync.Once
}

// shardHealthEvery is how often the tracker looks, whoever asks.
const shardHealthEvery = 500 * time.Millisecond

func newShardHealth(o *owners, grace time.Duration, log *zap.Logger) *shardHealth {
	h := &shardHealth{log: log, warn: logevery.New(time.Minute, nil), stop: make(chan struct{}),
		check: func() []int { return ordered.Unserved(o.coord.Owners(), o.self, o.alloc.Serves) }}
	h.grace.Store(int64(grace))
	go func() {
		t := time.NewTicker(shardHealthEvery)
		defer t.Stop()
		for {
			select {
			case <-h.stop:
				return
			case <-t.C:
				o.claiming() // the start's summary line as soon as it ends
				h.stuck()
			}
		}
	}()
	return h
}

// stuck looks at the shards now and returns those unserved for grace or
// longer, in shard order.
func (h *shardHealth) stuck() []int {
	unserved := h.check()
	now, grace := time.Now(), h.graceDur()
	h.mu.Lock()
	var out []int
	was := h.since
	h.since = [segment.OrderedShards]time.Time{}
	for _, s := range unserved {
		h.since[s] = was[s]
		if h.since[s].IsZero() {
			h.since[s] = now
		}
		if now.Sub(h.since[s]) >= grace {
			out = append(out, s)
		}
	}
	h.mu.Unlock()
	if len(out) > 0 {
		if ok, suppressed := h.warn.Allow("unserved"); ok {
			h.log.Warn("ORDERED shards have no serving owner; requests for their keys are refused (retryable) until one serves them",
				zap.Ints("shards", out), zap.Duration("for_at_least", grace), zap.Int("suppressed", suppressed),
				zap.String("check", "the ORDERED coordinator's log on the owner: a claim failing (store down, lock waits), a shard fenced by a newer epoch, or no live node"))
		}
	}
	return out
}

func (h *shardHealth) graceDur() time.Duration { return time.Duration(h.grace.Load()) }

func (h *shardHealth) close() { h.once.Do(func() { close(h.stop) }) }

// unservedShards is o's stuck shards (none without owners, or before the
// tracker runs).
func (o *owners) unservedShards() []int {
	if o == nil || o.health == nil {
		return nil
	}
	return o.health.stuck()
}
